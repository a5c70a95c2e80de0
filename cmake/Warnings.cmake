# kvatlas_target_warnings(target): warnings are PRIVATE to our own targets, so consumers
# of the client library never inherit -Werror.
function(kvatlas_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                                           -Wnon-virtual-dtor -Wimplicit-fallthrough)
  if(KVATLAS_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # Boost 1.74's awaitable.hpp uses std::exchange without <utility> (toolchain-notes.md #1).
  target_compile_options(${target} PRIVATE -include utility)
endfunction()
