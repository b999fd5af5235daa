//===- HostDevice.h - Functions both the host and the kernels call -*- C++ -*-===//
//
// A params header's small helpers (a size a launch needs, computed by the
// runtime and checked by the kernel) are stated once and compiled for both
// sides: K3C_HOST_DEVICE marks them __host__ __device__ under nvcc and is
// empty for the host compiler.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_HOSTDEVICE_H
#define K3C_KERNELS_COMMON_HOSTDEVICE_H

#ifdef __CUDACC__
#define K3C_HOST_DEVICE __host__ __device__
#else
#define K3C_HOST_DEVICE
#endif

#endif // K3C_KERNELS_COMMON_HOSTDEVICE_H
