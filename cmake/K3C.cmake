#===- K3C.cmake - Small helpers for the k3c build -------------------------===#

# k3c_add_unit_test(<name> SOURCES <files...> LIBS <libs...>)
# A GoogleTest executable registered with CTest as unit/<name>.
function(k3c_add_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/test/unit/bin)
  add_test(NAME unit/${name} COMMAND ${name})
  set_property(GLOBAL APPEND PROPERTY K3C_UNIT_TESTS ${name})
endfunction()
