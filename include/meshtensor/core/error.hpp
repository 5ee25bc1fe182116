#pragma once
// The exceptions meshtensor throws. Every message names the dim, axis, string or processor at fault
// and says what would have been valid, so a user can fix the call without reading the library.

#include <stdexcept>
#include <string>

namespace meshtensor {

/// Base of every exception thrown by meshtensor.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A shape, mesh or layout string that does not follow the `name:value` syntax.
class ParseError : public Error {
 public:
  using Error::Error;
};

/// A dim or shape that is invalid on its own or disagrees with another operand.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A layout that cannot be applied to a tensor on a mesh.
class LayoutError : public Error {
 public:
  using Error::Error;
};

/// A mesh that does not fit the processors of the run.
class MeshError : public Error {
 public:
  using Error::Error;
};

/// A failure of the transport itself (message size mismatch, MPI error, ...).
class CommError : public Error {
 public:
  using Error::Error;
};

/// No usable GPU for a processor (none visible, too few for the ranks on a host, a driver older
/// than the CUDA runtime), or a CUDA, cuDNN or cuBLAS call that failed; the message names which.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// No GPU for a processor: no driver, none visible, or fewer on a host than processors there. A
/// test of the GPU backend skips on it; any other DeviceError is a broken installation.
class NoGpuError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// A processor's memory (a GPU's, or the host's) has no room for a block: the message names the
/// bytes asked, the memory, what the processor holds, and the tensor where one asked.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be read or written (.npy, NIfTI, checkpoints); the message names the file.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A failure every processor of a run raised alike (agree_on: one processor's, learnt by all), so
/// that run() reports it once rather than once per processor.
class AgreedError : public IoError {
 public:
  using IoError::IoError;
};

/// Thrown on every other processor when one processor of an in-process run failed, so that none of
/// them waits forever for a message that will never come.
class PeerFailure : public Error {
 public:
  using Error::Error;
};

}  // namespace meshtensor
