// Block-wide idioms shared by the kernels, included by NVRTC as a named header (the sources
// that include it list it in kernels/lib.rs): a tree reduction in shared memory
// and the Hillis-Steele inclusive scan. Both visit the elements in a fixed order, so results
// do not depend on scheduling, and both end with the block synchronized.
#ifndef VORTEX_COMMON_CUH
#define VORTEX_COMMON_CUH

// Tree reduction over the first n elements of one block's shared arrays (n a power of two,
// at most blockDim.x): for h = n/2, n/4, ..., 1 the threads below h call combine(tid, tid + h)
// (element tid + h folded into element tid), with a __syncthreads() after each step; element
// 0 then holds the reduction. `n` keeps its type (int for a constant, unsigned for blockDim.x)
// so that h = n / 2 is computed as the caller wrote it.
template <typename N, typename Combine>
__device__ __forceinline__ void block_tree_reduce(N n, Combine combine) {
    for (int h = n / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) combine(threadIdx.x, threadIdx.x + h);
        __syncthreads();
    }
}

// Hillis-Steele inclusive scan of sh[0..N) in place, one element per thread of a block of N
// threads.
template <int N>
__device__ __forceinline__ void block_inclusive_scan(int* sh) {
    for (int h = 1; h < N; h <<= 1) {
        int o = threadIdx.x >= h ? sh[threadIdx.x - h] : 0;
        __syncthreads();
        sh[threadIdx.x] += o;
        __syncthreads();
    }
}

#endif  // VORTEX_COMMON_CUH
