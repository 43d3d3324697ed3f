/* tiles.cuh - global -> shared memory tile copies of the fp16/bf16 kernels (cp.async,
 * 16 bytes per copy): the sm80 kernels' XOR-swizzled rows of D elements and the Hopper
 * kernels' 128-byte swizzled panels that the wgmma descriptors read.
 */
#ifndef FA_CUDA_TILES_CUH
#define FA_CUDA_TILES_CUH

#include "device/ptx.cuh"

/* ---- sm80 layout ------------------------------------------------------------------------ */
/* Shared-memory tile of rows of D elements, 16-byte chunks XOR-swizzled by (row & 7) so
   that the 8 rows one ldmatrix phase reads fall in 8 different bank groups. */
template <int D>
__device__ __forceinline__ int fa_swz(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) << 3);
}

/* Copy rows [r0, r0 + R) x cols [0, D) of a row-major tile into swizzled shared memory;
   rows >= nvalid and columns >= ncols are zero-filled. rowptr(r) gives the global row. */
template <int D, int R, int NT, typename T, typename RowFn>
__device__ __forceinline__ void fa_load_tile(T *dst, int nvalid, int ncols, RowFn rowptr)
{
    constexpr int CPR = D / 8;                      /* 16-byte chunks per row */
#pragma unroll
    for (int it = 0; it < R * CPR / NT; it++) {
        int c = threadIdx.x + it * NT;
        int r = c / CPR, ch = c % CPR;
        bool ok = r < nvalid && ch * 8 < ncols;
        const T *src = ok ? rowptr(r) + ch * 8 : rowptr(0);
        fa_cp_async16(dst + fa_swz<D>(r, ch), src, ok ? 16 : 0);
    }
}

/* A whole tile of R rows (rows at src_row0 + r * row_stride, columns >= ncols zero-filled):
   thread t always copies chunk t % (D/8) of rows t / (D/8) + i * RSTEP, so its source is one
   pointer stepped by RSTEP rows (one 64-bit add per 16-byte copy instead of the general
   loader's per-row index and address arithmetic). */
template <int D, int R, int NT, typename T>
__device__ __forceinline__ void fa_load_full(T *dst, const T *src_row0, int64_t row_stride, int ncols)
{
    constexpr int CPR = D / 8, RSTEP = NT / CPR, IT = R * CPR / NT;
    static_assert(NT % CPR == 0, "each thread keeps one chunk column");
    const int ch = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
    const bool ok = ch * 8 < ncols;
    const T *src = src_row0 + (int64_t)r0 * row_stride + ch * 8;
    const int64_t step = (int64_t)RSTEP * row_stride;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        fa_cp_async16(dst + fa_swz<D>(r0 + it * RSTEP, ch), ok ? src : src_row0, ok ? 16 : 0);
        src += step;
    }
}

/* ---- the 128-byte swizzle of the Hopper kernels ------------------------------------------ */
/* The first 1024-byte aligned shared-memory address at or after p (the 128-byte swizzle
   repeats every 1024 bytes; the kernels ask for 1 KiB of slack). */
__device__ __forceinline__ unsigned char *fa_align1024(unsigned char *p)
{
    return p + ((1024 - (fa_smem_u32(p) & 1023)) & 1023);
}

/* Byte offset of 16-byte chunk ch of row r in a swizzled tile of R rows. */
template <int R>
__device__ __forceinline__ uint32_t fa_swz128(int r, int ch)
{
    return (uint32_t)((ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* Rows [0, nvalid) x columns [0, ncols) of a tile of R rows into the swizzled layout; the
   rest is zero-filled (cp.async with 0 source bytes). */
template <int D, int R, int NT, typename T, typename RowFn>
__device__ __forceinline__ void fa_load_tile90(unsigned char *dst, int nvalid, int ncols, RowFn rowptr)
{
    constexpr int CPR = D / 8;
#pragma unroll
    for (int it = 0; it < R * CPR / NT; it++) {
        const int c = threadIdx.x + it * NT;
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < nvalid && ch * 8 < ncols;
        const T *src = ok ? rowptr(r) + ch * 8 : rowptr(0);
        fa_cp_async16(dst + fa_swz128<R>(r, ch), src, ok ? 16 : 0);
    }
}

/* The same by the 32 lanes of one warp in a rolled loop, each valid row's address from
   rowptr(r) (a paged cache's rows); `any` is a readable address for the zero-filled
   chunks' copies, which read no bytes. */
template <int D, int R, typename T, typename RowFn>
__device__ __forceinline__ void fa_load_rows_warp_fn(unsigned char *dst, const T *any, int nvalid, int ncols,
                                                     RowFn rowptr)
{
    constexpr int CPR = D / 8;
    for (int c = threadIdx.x % 32; c < R * CPR; c += 32) {
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < nvalid && ch * 8 < ncols;
        fa_cp_async16(dst + fa_swz128<R>(r, ch), ok ? rowptr(r) + ch * 8 : any, ok ? 16 : 0);
    }
}

/* The same by the 32 lanes of one warp (a producer warp), rows at row0 + r * rstride: lane
   l copies chunks l, l + 32, ... in a rolled loop (a producer runs on few registers). */
template <int D, int R, typename T>
__device__ __forceinline__ void fa_load_rows_warp(unsigned char *dst, const T *row0, int64_t rstride, int nvalid, int ncols)
{
    constexpr int CPR = D / 8;
    for (int c = threadIdx.x % 32; c < R * CPR; c += 32) {
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < nvalid && ch * 8 < ncols;
        fa_cp_async16(dst + fa_swz128<R>(r, ch), ok ? row0 + (int64_t)r * rstride + ch * 8 : row0, ok ? 16 : 0);
    }
}

/* A whole tile of R rows from a dense tensor (rows at src_row0 + r * row_stride): the fast
   path of the K/V loads. Thread t always copies chunk t % (D/8) of rows t / (D/8) + i * RSTEP,
   and RSTEP is a multiple of 8, so its swizzled destination is one base plus i * RSTEP rows
   and its source one pointer stepped by RSTEP rows: two adds per 16-byte copy, against the
   general loader's per-row index arithmetic. */
template <int D, int R, int NT, typename T>
__device__ __forceinline__ void fa_load_full90(unsigned char *dst, const T *src_row0, int64_t row_stride, int ncols)
{
    constexpr int CPR = D / 8, RSTEP = NT / CPR, IT = R * CPR / NT;
    static_assert(RSTEP % 8 == 0 && NT % CPR == 0, "the swizzle must repeat every RSTEP rows");
    const int ch = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
    const bool ok = ch * 8 < ncols;
    const T *src = src_row0 + (int64_t)r0 * row_stride + ch * 8;
    const int64_t step = (int64_t)RSTEP * row_stride;
    unsigned char *d0 = dst + fa_swz128<R>(r0, ch);
#pragma unroll
    for (int it = 0; it < IT; it++) {
        fa_cp_async16(d0 + it * RSTEP * 128, ok ? src : src_row0, ok ? 16 : 0);
        src += step;
    }
}

#endif /* FA_CUDA_TILES_CUH */
