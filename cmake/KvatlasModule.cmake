# kvatlas_server_module(name SOURCES ... DEPS ...): a static library kvatlas_<name> whose
# headers are included root-relative ("server/<name>/x.h").
function(kvatlas_server_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(kvatlas_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvatlas_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(kvatlas_${name} PUBLIC kvatlas_common ${ARG_DEPS})
  kvatlas_target_warnings(kvatlas_${name})
endfunction()
