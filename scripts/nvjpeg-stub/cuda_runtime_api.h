/* Stand-in for the CUDA runtime header when generating nvJPEG bindings:
 * nvjpeg.h needs only the stream type from it, and the real header pulls in
 * the whole toolkit (crt/host_defines.h, ...). */
#pragma once
#include <stddef.h>
typedef struct CUstream_st *cudaStream_t;
