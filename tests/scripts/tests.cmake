# tests/scripts extra registrations (included by tests/CMakeLists.txt).
#
# scripts.gpu_lease_pack: scripts/gpu_lease.sh packs a GPU pass into what the device tool brings
# back (at most 8 files of 16 MiB), also when the pass was cut at its deadline; no GPU needed.
add_test(NAME scripts.gpu_lease_pack COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gpu_lease_pack.sh)
set_tests_properties(scripts.gpu_lease_pack PROPERTIES LABELS scripts TIMEOUT 120)
