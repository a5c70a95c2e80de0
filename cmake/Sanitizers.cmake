# KVATLAS_SANITIZER=address,undefined applies to every target in the build (our code and
# the tests), so that the whole process is instrumented.
#
# Without UBSan's vptr check: it asks whether memory is readable through a pipe, and a
# process with every file descriptor in use (a state the server must survive, tested in
# tests/integration/zmq_hostile_test.py) cannot create one, so the check then reports valid
# objects as invalid -- fatally, since nothing recovers.
if(KVATLAS_SANITIZER)
  add_compile_options(-fsanitize=${KVATLAS_SANITIZER} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  if(KVATLAS_SANITIZER MATCHES "undefined")
    add_compile_options(-fno-sanitize=vptr)
  endif()
  add_link_options(-fsanitize=${KVATLAS_SANITIZER})
endif()
