# gemm_bench compares both GEMM libraries in one process (docs/gemm.md), whichever one LONGSEQ_GEMM
# put behind kernels/gemm, so it links both directly.
if(TARGET gemm_bench)
  target_include_directories(gemm_bench PRIVATE ${OPENBLAS_INCLUDE})
  target_link_libraries(gemm_bench PRIVATE ${OPENBLAS_LIB})
  if(DNNL_LIB)
    target_compile_definitions(gemm_bench PRIVATE LONGSEQ_BENCH_HAVE_ONEDNN=1)
    target_link_libraries(gemm_bench PRIVATE ${DNNL_LIB})
  endif()
endif()
