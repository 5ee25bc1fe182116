// The vector registers the row kernels are written in: 16 floats with AVX-512, 8 with AVX2 and
// FMA. Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {

#if MESHTENSOR_TARGET_AVX512
// 16 floats rounded to bfloat16 bit patterns as VCVTNEPS2BF16 rounds them.
inline __m256i narrowed_bf16(__m512 values) {
#if MESHTENSOR_TARGET_AVX512_BF16
  return cpu::narrowed_bf16_by_instruction(values);
#else
  return cpu::narrowed_bf16_emulated(values);
#endif
}

struct Simd {
  // A vector type without __m512's may_alias: the compiler may keep accumulators in registers
  // across loops that load floats (which may alias an __m512 in memory).
  typedef float V __attribute__((vector_size(64)));
  static constexpr int lanes = 16;
  static constexpr int registers = 32;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const bfloat16* p) {  // widened (exact)
    return cpu::widened_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // Each value rounded to bfloat16 as bfloat16(float) rounds it, and widened again (exact).
  static V rounded_to_bf16(V v) { return cpu::widened_bf16(narrowed_bf16(__m512(v))); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // Around the cache (p aligned to a vector): the line is not read before it is written.
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  // Stops the compiler from folding a loaded vector into each instruction that uses it (one load
  // per use), where the loads rather than the multiply-adds would bound the loop.
  static void keep_in_register(V& v) { asm("" : "+v"(v)); }

  // Eight channels' rows of 16 positions <-> 16 positions of 8 channels ([16][8] as 8 vectors),
  // by three rounds of two-source permutes: single elements of channel pairs, then pairs, then
  // fours.
  // Inlined, so that a tile's accumulators go from registers to memory once, transposed.
  __attribute__((always_inline)) static void to_positions(const V (&rows)[8], V (&out)[8]) {
    alignas(64) static constexpr int pairs[2][16] = {
        {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
        {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    alignas(64) static constexpr long long fours[2][8] = {{0, 8, 1, 9, 2, 10, 3, 11},
                                                          {4, 12, 5, 13, 6, 14, 7, 15}};
    alignas(64) static constexpr long long eights[2][8] = {{0, 1, 8, 9, 2, 3, 10, 11},
                                                           {4, 5, 12, 13, 6, 7, 14, 15}};
    V a[8], b[8];
    for (int c = 0; c < 8; c += 2)
      for (int h = 0; h < 2; ++h) a[c + h] = permute32(rows[c], pairs[h], rows[c + 1]);
    for (int q = 0; q < 8; q += 4)  // channels q..q+3
      for (int half = 0; half < 2; ++half)
        for (int h = 0; h < 2; ++h)
          b[q + 2 * half + h] = permute64(a[q + half], fours[h], a[q + half + 2]);
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) out[2 * j + h] = permute64(b[j], eights[h], b[j + 4]);
  }
  static void to_channels(const V (&in)[8], V (&rows)[8]) {
    alignas(64) static constexpr long long fours[2][8] = {{0, 1, 4, 5, 8, 9, 12, 13},
                                                          {2, 3, 6, 7, 10, 11, 14, 15}};
    alignas(64) static constexpr long long pairs[2][8] = {{0, 2, 4, 6, 8, 10, 12, 14},
                                                          {1, 3, 5, 7, 9, 11, 13, 15}};
    alignas(64) static constexpr int singles[2][16] = {
        {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
        {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
    V a[8], b[8];
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) b[j + 4 * h] = permute64(in[2 * j], fours[h], in[2 * j + 1]);
    for (int q = 0; q < 8; q += 4)
      for (int half = 0; half < 2; ++half)
        for (int h = 0; h < 2; ++h)
          a[q + half + 2 * h] = permute64(b[q + 2 * half], pairs[h], b[q + 2 * half + 1]);
    for (int c = 0; c < 8; c += 2)
      for (int h = 0; h < 2; ++h) rows[c + h] = permute32(a[c], singles[h], a[c + 1]);
  }

 private:
  static V permute32(V a, const int (&index)[16], V b) {
    return _mm512_permutex2var_ps(a, _mm512_load_si512(index), b);
  }
  static V permute64(V a, const long long (&index)[8], V b) {
    return _mm512_castpd_ps(
        _mm512_permutex2var_pd(_mm512_castps_pd(a), _mm512_load_si512(index), _mm512_castps_pd(b)));
  }
};
#else
struct Simd {
  typedef float V __attribute__((vector_size(32)));  // as for AVX-512
  static constexpr int lanes = 8;
  static constexpr int registers = 16;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const bfloat16* p) {  // widened (exact)
    return cpu::widened_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V rounded_to_bf16(V v) { return cpu::widened_bf16(cpu::narrowed_bf16(__m256(v))); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static float sum(V v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
  }
  static void keep_in_register(V& v) { asm("" : "+x"(v)); }

  // Eight channels' rows of 8 positions <-> 8 positions of 8 channels: a transpose, its own
  // inverse.
  static void to_positions(const V (&rows)[8], V (&out)[8]) {
    V t[8], u[8];
    for (int c = 0; c < 8; c += 2) {
      t[c] = _mm256_unpacklo_ps(rows[c], rows[c + 1]);
      t[c + 1] = _mm256_unpackhi_ps(rows[c], rows[c + 1]);
    }
    for (int q = 0; q < 8; q += 4)
      for (int h = 0; h < 2; ++h) {
        u[q + 2 * h] = _mm256_shuffle_ps(t[q + h], t[q + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[q + 2 * h + 1] = _mm256_shuffle_ps(t[q + h], t[q + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
      }
    for (int j = 0; j < 4; ++j) {
      out[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
      out[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
    }
  }
  static void to_channels(const V (&in)[8], V (&rows)[8]) { to_positions(in, rows); }
};
#endif

// Vectors held in memory a std::vector allocates, stored and loaded unaligned: its allocator
// aligns them as the program's flags align the vector type, which can be less than this set's.
class VectorList {
 public:
  void push_back(Simd::V v) {
    values_.resize(values_.size() + Simd::lanes);
    Simd::store(values_.data() + values_.size() - Simd::lanes, v);
  }
  Simd::V operator[](std::size_t k) const { return Simd::load(values_.data() + k * Simd::lanes); }

 private:
  std::vector<float> values_;
};

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
