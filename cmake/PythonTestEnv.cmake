# kvatlas_python_test_env(OUT): the ENVIRONMENT of a test that runs /usr/bin/python3 and
# imports the kvatlas package from the build tree (KVATLAS_PYTHON_DIR). The interpreter is
# not instrumented: in a sanitizer build the ASan runtime must be loaded before it starts,
# and libstdc++ with it (CPython does not link it, and ASan's __cxa_throw interceptor must
# find it at startup, else the first C++ exception aborts). Leak detection is off:
# CPython's allocations alive at exit are not leaks of ours.
function(kvatlas_python_test_env out)
  set(env "PYTHONPATH=${KVATLAS_PYTHON_DIR}" "PYTHONDONTWRITEBYTECODE=1")
  if(KVATLAS_SANITIZER MATCHES "address")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE libasan OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                    OUTPUT_VARIABLE libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND env "LD_PRELOAD=${libasan}:${libstdcxx}"
         "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1"
         "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  set(${out} "${env}" PARENT_SCOPE)
endfunction()
