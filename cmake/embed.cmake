# tessera_embed_catalog(TARGET DIR) compiles every *.json file under DIR into TARGET, a library
# that exposes them through tessera::catalog::EmbeddedFiles() (src/catalog/embedded.h). The binary
# then carries its default catalog and works from any directory.
function(tessera_embed_catalog target dir)
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${dir}/*.json)
  set(out ${CMAKE_BINARY_DIR}/generated/embedded_catalog.cc)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DDIR=${dir} -DOUT=${out} -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${files} ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding the catalog data files")
  add_library(${target} STATIC ${out})
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR}/src)
endfunction()
