#pragma once
// Where longseq's shipped data (presets, hardware profiles, the default corpus) is found, so that
// the binary works from any directory: the first of
//   1. $LONGSEQ_DATA_DIR,
//   2. <prefix>/share/longseq, where the running executable is <prefix>/bin/longseq (an install),
//   3. the source tree's data/ (compiled in; a build tree).
#include <string>

namespace longseq::core {

/// The data directory (see above). Never empty; the last candidate is returned even when it is
/// missing, so a later open names a full path.
std::string data_dir();

/// `path` itself when it exists or is absolute; otherwise, when it starts with "data/" and
/// data_dir()/<rest> exists, that file (a default such as "data/kjv-genesis-exodus.txt" run from
/// outside the repository). Else `path` unchanged, so the open fails naming what was asked for.
std::string resolve_data_file(const std::string& path);

}  // namespace longseq::core
