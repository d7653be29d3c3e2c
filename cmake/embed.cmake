# tessera_embed(TARGET DIR PATTERNS NAMESPACE INCLUDE [EXTRA NAME=PATH ...]) compiles the files
# under DIR matching PATTERNS (a list of globs), and the EXTRA files, into TARGET, a library that
# exposes them through NAMESPACE::EmbeddedFiles(), declared in INCLUDE. The binary then carries
# them and works from any directory.
function(tessera_embed target dir patterns namespace include)
  cmake_parse_arguments(ARG "" "" "EXTRA" ${ARGN})
  set(globs "")
  foreach(p ${patterns})
    list(APPEND globs ${dir}/${p})
  endforeach()
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${globs})
  set(extra_paths "")
  foreach(e ${ARG_EXTRA})
    string(FIND "${e}" "=" eq)
    math(EXPR from "${eq} + 1")
    string(SUBSTRING "${e}" ${from} -1 path)
    list(APPEND extra_paths ${path})
  endforeach()
  string(REPLACE ";" "|" patterns_arg "${patterns}")
  string(REPLACE ";" "|" extra_arg "${ARG_EXTRA}")
  set(out ${CMAKE_BINARY_DIR}/generated/${target}.cc)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DDIR=${dir} "-DPATTERNS=${patterns_arg}" "-DEXTRA=${extra_arg}"
            -DNAMESPACE=${namespace} -DINCLUDE=${include} -DOUT=${out}
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${files} ${extra_paths} ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding the files of ${target}"
    VERBATIM)
  add_library(${target} STATIC ${out})
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR}/src)
endfunction()
