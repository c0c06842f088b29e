#pragma once
// Whole-file I/O shared by every format (safetensors, token files, JSON configs, metrics): read a
// file, and write one atomically: the bytes go to `path.tmp`, are fsync'ed, renamed over `path`,
// and the directory is fsync'ed, so a crash leaves either the old file or the new one, never a
// torn one. Errors: core::Error("[io] <path>: <what>").
#include <cstddef>
#include <functional>
#include <string>

namespace longseq::core {

/// The whole file; throws core::Error("[io] <path>: ...") when it cannot be read.
std::string read_file(const std::string& path);
/// Writes `text` to `path` atomically (tmp, fsync, rename, fsync directory).
void write_file_atomic(const std::string& path, const std::string& text);
/// The general form: `body(fd, tmp_path)` writes the content to the open descriptor (with
/// write_all); then fsync, rename and directory fsync as above. A throwing body removes the tmp.
void write_atomic(const std::string& path,
                  const std::function<void(int fd, const std::string& tmp)>& body);
/// write(2) until all `n` bytes are out (EINTR retried); throws naming `path` on failure.
void write_all(int fd, const void* data, size_t n, const std::string& path);
/// fsync of a directory, so that renames and creations inside it are durable (best effort: a
/// filesystem that refuses directory descriptors is skipped).
void fsync_dir(const std::string& dir);

}  // namespace longseq::core
