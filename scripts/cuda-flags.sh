#!/usr/bin/env bash
# cuda-flags.sh - the CMake options of the GPU backend for this machine, one
# per line: CUDA wherever the CUDA Toolkit is in /usr/local/cuda (its tests
# skip, saying why, without a GPU), NCCL where the toolkit has it beside.
# scripts/test.sh and examples/demo.sh configure with them.
if [ -x /usr/local/cuda/bin/nvcc ]; then
	echo -DDVAR_WITH_CUDA=ON
	echo -DCUDAToolkit_ROOT=/usr/local/cuda
	if [ -f /usr/local/cuda/include/nccl.h ]; then
		echo -DDVAR_WITH_NCCL=ON
	else
		echo -DDVAR_WITH_NCCL=OFF
	fi
else
	echo -DDVAR_WITH_CUDA=OFF
	echo -DDVAR_WITH_NCCL=OFF
fi
