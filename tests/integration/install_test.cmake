# The install + find_package test (run by CTest as `cmake -P`): installs the build into a
# temporary prefix, builds client/examples/ against it as a separate project would, with
# find_package(kvatlas) and then with pkg-config, and runs the example (against a port
# where nothing listens: it must link, start and report the server unavailable).
#
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, SANITIZER (may be empty).
cmake_minimum_required(VERSION 3.20)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(f include/kvatlas/client/client.h include/kvatlas/client/block_hasher.h
          include/kvatlas/common/protocol.h lib/libkvatlas_client.a lib/libkvatlas_common.a
          lib/cmake/kvatlas/kvatlasConfig.cmake lib/pkgconfig/kvatlas.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
# Asio stays an implementation detail: no installed header may include Boost.
file(GLOB_RECURSE headers ${prefix}/include/kvatlas/*)
foreach(h ${headers})
  file(STRINGS ${h} boost_lines REGEX "#include <boost/")
  if(boost_lines)
    message(FATAL_ERROR "${h} includes Boost: ${boost_lines}")
  endif()
endforeach()

# The installed libraries are instrumented in sanitizer builds; so must the example be.
set(flags "")
if(SANITIZER)
  set(flags "-fsanitize=${SANITIZER}")
endif()

# 1. CMake: find_package(kvatlas) → kvatlas::client.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/client/examples -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_PREFIX_PATH=${prefix} "-DCMAKE_CXX_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

execute_process(COMMAND ${WORK_DIR}/build/route_example 127.0.0.1:1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "unavailable: cannot connect to 127.0.0.1:1")
  message(FATAL_ERROR "route_example against a closed port: exit ${rc}\n${out}\n${err}")
endif()

# 2. pkg-config: the flags alone build the same program.
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(CXX c++ REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs kvatlas RESULT_VARIABLE rc
                OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config kvatlas failed: ${err}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(san_flags UNIX_COMMAND "${flags}")
run(${CXX} -std=c++20 ${san_flags} ${SOURCE_DIR}/client/examples/route_example.cc ${pc_flags}
    -o ${WORK_DIR}/route_example_pc)
execute_process(COMMAND ${WORK_DIR}/route_example_pc 127.0.0.1:1 RESULT_VARIABLE rc)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "route_example (pkg-config build) exited ${rc}")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "install + find_package + pkg-config: ok")
