// The emulated NVRTC (libnvrtc.so.13): "compiling" a source checks the options meshtensor passes
// and gives, as its PTX, the names of the kernels the source defines, which the emulated runtime
// then runs as host code compiled from the same source. Whether the sources compile for real GPUs
// is test_runtime_compile's job, with the real NVRTC.
#include <nvrtc.h>

#include <cstring>
#include <regex>
#include <string>

struct _nvrtcProgram {
  std::string source, name, ptx, log;
};

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult result) {
  switch (result) {
    case NVRTC_SUCCESS:
      return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT:
      return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM:
      return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INVALID_OPTION:
      return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION:
      return "NVRTC_ERROR_COMPILATION";
    default:
      return "NVRTC error (emulated)";
  }
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* program, const char* source, const char* name,
                               int headers, const char* const*, const char* const*) {
  if (!program || !source || headers != 0) return NVRTC_ERROR_INVALID_INPUT;
  *program = new _nvrtcProgram{source, name ? name : "default_program", {}, {}};
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* program) {
  if (!program) return NVRTC_ERROR_INVALID_PROGRAM;
  delete *program;
  *program = nullptr;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram program, int count, const char* const* options) {
  if (!program) return NVRTC_ERROR_INVALID_PROGRAM;
  bool architecture = false;
  for (int i = 0; i < count; ++i) {
    const std::string option = options[i];
    if (option.rfind("--gpu-architecture=compute_", 0) == 0) architecture = true;
  }
  if (!architecture) {
    program->log = "no --gpu-architecture=compute_XY option";
    return NVRTC_ERROR_INVALID_OPTION;
  }
  static const std::regex kernel(R"(extern "C" __global__ void ([A-Za-z0-9_]+))");
  program->ptx = "// meshtensor emulated PTX of " + program->name + "\n";
  for (std::sregex_iterator k(program->source.begin(), program->source.end(), kernel), end;
       k != end; ++k)
    program->ptx += "kernel " + (*k)[1].str() + "\n";
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram program, size_t* size) {
  if (!program || !size) return NVRTC_ERROR_INVALID_INPUT;
  *size = program->ptx.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram program, char* ptx) {
  if (!program || !ptx) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(ptx, program->ptx.c_str(), program->ptx.size() + 1);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram program, size_t* size) {
  if (!program || !size) return NVRTC_ERROR_INVALID_INPUT;
  *size = program->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram program, char* log) {
  if (!program || !log) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(log, program->log.c_str(), program->log.size() + 1);
  return NVRTC_SUCCESS;
}

}  // extern "C"
