# The engine's CUDA runtime layer: NVRTC and cuFFT user-space libraries on top of the base image.
# Built by make-base.sh from a context holding only lib/ (the .so files taken out of NVIDIA's wheels).
# No driver here: with a GPU, the NVIDIA container runtime injects libcuda.so.1 and friends.
ARG BASE_IMAGE=fgpu-base:bookworm
FROM ${BASE_IMAGE}
COPY lib/ /usr/local/cuda/lib64/
# cudarc dlopens by soname (libnvrtc.so.13, libcufft.so.12), so the loader cache must know the folder.
RUN echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/fgpu-cuda.conf && ldconfig
# Tell the NVIDIA container runtime what to inject when a GPU is requested.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
