# cuda_*_bench (CUDA builds only; bench/CMakeLists.txt leaves them out of other builds) time
# kernels/cuda: link just what they use, not the CPU layers the generic bench rule adds.
# LONGSEQ_SOURCE_DIR comes from the generic rule.
file(GLOB _cuda_benches CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda_*_bench.cpp)
foreach(src ${_cuda_benches})
  get_filename_component(name ${src} NAME_WE)
  if(TARGET ${name})
    set_property(TARGET ${name} PROPERTY LINK_LIBRARIES longseq_flags longseq_kernels_cuda
                 longseq_core nlohmann_json::nlohmann_json)
  endif()
endforeach()
