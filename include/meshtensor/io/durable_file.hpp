#pragma once
// Files that survive a crash or a power loss whole or not at all: written under a temporary name
// created exclusively (never through a symbolic link someone left there), flushed to the disk,
// renamed into place, and the rename itself flushed with its directory. Without the flushes a
// power loss can leave a file of the right size full of zeros under its final name.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "meshtensor/core/error.hpp"

namespace meshtensor::io {

/// The directory part of `path` ("." when it has none).
inline std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// Flushes `path` (a file or a directory) to the disk; an IoError naming it when that fails.
inline void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw IoError(path + ": cannot open to flush it to the disk: " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0 || errno == EINVAL;  // some filesystems cannot sync a dir
  const int error = errno;
  ::close(fd);
  if (!synced) throw IoError(path + ": flushing to the disk failed: " + std::strerror(error));
}

/// Creates `temporary` for writing: a file left there by an earlier run (or a link someone put
/// there) is removed first, and the new one is created exclusively without following links.
inline int create_temporary(const std::string& temporary, const std::string& final_path) {
  if (::unlink(temporary.c_str()) != 0 && errno != ENOENT)
    throw IoError(final_path + ": cannot remove the stale temporary " + temporary + ": " +
                  std::strerror(errno));
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    throw IoError(final_path + ": cannot create " + temporary + " (" + std::strerror(errno) +
                  "; does the directory exist and is it writable?)");
  return fd;
}

/// Moves the finished `temporary` to `path` and flushes the directory that holds both.
inline void publish(const std::string& temporary, const std::string& path) {
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw IoError(
        path + ": cannot rename the finished temporary file into place: " + std::strerror(error));
  }
  sync_path(parent_directory(path));
}

/// Writes all `size` bytes at `data` to `fd`; false when the system writes no more.
inline bool write_all(int fd, const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t wrote = ::write(fd, at, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    at += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return true;
}

/// Flushes and closes `fd`, the temporary of `path`; removes the temporary and throws an IoError
/// when anything written to it failed (`written`) or the flush or close does.
inline void finish_temporary(int fd, bool written, const std::string& temporary,
                             const std::string& path) {
  const bool synced = written && ::fsync(fd) == 0;
  const int error = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    ::unlink(temporary.c_str());
    throw IoError(path + ": writing failed (" + std::strerror(error) + "; is the disk full?)");
  }
}

/// Writes `size` bytes at `data`, after `head`, to `path` durably: a temporary beside it, flushed,
/// renamed, the rename flushed.
inline void write_durably(const std::string& path, const std::string& head,
                          const void* data = nullptr, std::size_t size = 0) {
  const std::string temporary = path + ".partial";
  const int fd = create_temporary(temporary, path);
  const bool written = write_all(fd, head.data(), head.size()) && write_all(fd, data, size);
  finish_temporary(fd, written, temporary, path);
  publish(temporary, path);
}

}  // namespace meshtensor::io
