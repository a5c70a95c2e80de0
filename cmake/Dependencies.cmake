# Every third-party dependency comes from Debian packages (scripts/setup installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(RocksDB REQUIRED CONFIG)
find_package(nlohmann_json 3.10 REQUIRED CONFIG)
find_package(Boost 1.74 REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(msgpackc-cxx REQUIRED CONFIG NAMES msgpack)  # libmsgpack-cxx-dev: target msgpackc-cxx
find_package(cppzmq REQUIRED CONFIG)  # cppzmq-dev (headers) over libzmq3-dev: target cppzmq
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
if(KVATLAS_BUILD_TESTS)
  find_package(doctest REQUIRED CONFIG)
  include(doctest)
endif()
