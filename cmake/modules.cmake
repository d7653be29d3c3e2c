include(GoogleTest)

# tessera_module(NAME DEPS ...) builds src/NAME/**/*.cc (tests excluded) into the static library
# tessera_NAME, and src/NAME/**/*_test.cc into the test binary NAME_test, registered with ctest.
# A module folder holds one module; tests sit beside the code they test.
function(tessera_module name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE all_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cc)
  set(sources ${all_sources})
  list(FILTER sources EXCLUDE REGEX "_test\\.cc$")
  set(tests ${all_sources})
  list(FILTER tests INCLUDE REGEX "_test\\.cc$")
  if(sources)
    add_library(tessera_${name} STATIC ${sources})
    target_include_directories(tessera_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(tessera_${name} PUBLIC ${ARG_DEPS} Threads::Threads PRIVATE tessera_warnings)
  else()
    add_library(tessera_${name} INTERFACE)
    target_include_directories(tessera_${name} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(tessera_${name} INTERFACE ${ARG_DEPS})
  endif()
  if(TESSERA_BUILD_TESTS AND tests)
    add_executable(${name}_test ${tests})
    target_link_libraries(${name}_test PRIVATE tessera_${name} tessera_testing GTest::gmock
                          GTest::gtest_main tessera_warnings)
    gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "TESSERA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endfunction()
