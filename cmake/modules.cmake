include(GoogleTest)

# Precompiled headers: the standard and library headers that nearly every translation unit parses
# (nlohmann/json alone takes 1.5 s a file), parsed once per target. Tests add GoogleTest's. The
# tests' own code is built at -O1 in a release build: the code they test keeps the build's -O3,
# and a test file then compiles in two thirds of the time.
set(TESSERA_PCH <algorithm> <chrono> <cstdint> <functional> <map> <memory> <optional> <set>
    <string> <string_view> <unordered_map> <utility> <vector> <fmt/format.h> <nlohmann/json.hpp>)
set(TESSERA_TEST_PCH ${TESSERA_PCH} <gmock/gmock.h> <gtest/gtest.h>)

# tessera_test_target(TARGET): a test binary's precompiled headers and optimisation level.
function(tessera_test_target target)
  target_precompile_headers(${target} PRIVATE ${TESSERA_TEST_PCH})
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
endfunction()

# tessera_module(NAME DEPS ... [PCH HEADER...]) builds src/NAME/**/*.cc (tests excluded) into the
# static library tessera_NAME, and src/NAME/**/*_test.cc into the test binary NAME_test,
# registered with ctest. A module folder holds one module; tests sit beside the code they test.
# PCH adds headers that the module's own files parse to its precompiled ones.
function(tessera_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;PCH" ${ARGN})
  file(GLOB_RECURSE all_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cc)
  set(sources ${all_sources})
  list(FILTER sources EXCLUDE REGEX "_test\\.cc$")
  set(tests ${all_sources})
  list(FILTER tests INCLUDE REGEX "_test\\.cc$")
  if(sources)
    add_library(tessera_${name} STATIC ${sources})
    target_include_directories(tessera_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(tessera_${name} PUBLIC ${ARG_DEPS} Threads::Threads PRIVATE tessera_warnings)
    target_precompile_headers(tessera_${name} PRIVATE ${TESSERA_PCH} ${ARG_PCH})
  else()
    add_library(tessera_${name} INTERFACE)
    target_include_directories(tessera_${name} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(tessera_${name} INTERFACE ${ARG_DEPS})
  endif()
  if(TESSERA_BUILD_TESTS AND tests)
    add_executable(${name}_test ${tests})
    target_link_libraries(${name}_test PRIVATE tessera_${name} tessera_testing GTest::gmock
                          GTest::gtest_main tessera_warnings)
    tessera_test_target(${name}_test)
    gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "TESSERA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endfunction()
