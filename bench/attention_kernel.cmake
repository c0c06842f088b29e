# attention_kernel_bench measures kernels/ only: link just what it uses (not the upper layers the
# generic bench rule adds), and let it find bench/attention_torch_naive.py (the PyTorch baseline)
# in the source tree by default.
if(TARGET attention_kernel_bench)
  set_property(TARGET attention_kernel_bench PROPERTY LINK_LIBRARIES longseq_flags
               longseq_kernels longseq_core OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json)
  target_compile_definitions(attention_kernel_bench PRIVATE
                             LONGSEQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
