# kvatlas_target_warnings(target): warnings are PRIVATE to our own targets, so consumers
# of the client library never inherit -Werror.
function(kvatlas_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                                           -Wnon-virtual-dtor -Wimplicit-fallthrough)
  # g++ 12 at -O2 reports std::string copies as overlapping memcpy (-Wrestrict false
  # positive, GCC bug 105329); it would make every optimised build fail under -Werror.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(KVATLAS_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # Boost 1.74's awaitable.hpp uses std::exchange without <utility> (toolchain-notes.md #1).
  target_compile_options(${target} PRIVATE -include utility)
endfunction()
