# KVATLAS_SANITIZER=address,undefined applies to every target in the build (our code and
# the tests), so that the whole process is instrumented.
if(KVATLAS_SANITIZER)
  add_compile_options(-fsanitize=${KVATLAS_SANITIZER} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${KVATLAS_SANITIZER})
endif()
