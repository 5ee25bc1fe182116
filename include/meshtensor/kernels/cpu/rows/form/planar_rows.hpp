// Channels-last rows turned channel by channel, for kernels that run along a row: a plane
// [n1][n2][c] becomes [n1][c][width], each channel's row starting `before` zeros in and padded with
// zeros to `width` (a whole number of vectors), so that the kernels read whole vectors with no
// bounds to check. The results go back the other way, a tile of vectors at a time.
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {

namespace detail {

// A per-channel affine map (ChannelAffine) as vectors of channels-last floats: per group of 8
// channels, the scale and shift of each lane's channel (a vector holds L / 8 positions' 8).
struct AffineVectors {
  VectorList scale, shift;
  Simd::V floor;

  AffineVectors(const ChannelAffineIn<float>& f, std::int64_t c) {
    alignas(64) float lanes[Simd::lanes];
    const auto vector_of = [&](auto&& value) {
      for (int lane = 0; lane < Simd::lanes; ++lane) lanes[lane] = value(lane);
      return Simd::load(lanes);
    };
    for (std::int64_t group = 0; group < c / 8; ++group) {
      scale.push_back(vector_of([&](int lane) { return f.scale[group * 8 + lane % 8]; }));
      shift.push_back(vector_of([&](int lane) { return f.shift[group * 8 + lane % 8]; }));
    }
    floor = vector_of([&](int) { return f.floor; });
  }
};

// shared::affine_floor's expression on vectors (a template instantiated on them would be compiled
// for the program's instructions, not this set's).
inline Simd::V affine_floor(Simd::V scale, Simd::V x, Simd::V shift, Simd::V floor) {
  const Simd::V y = scale * x + shift;
  return y < floor ? floor : y;
}

// Channels [first, first + 8) of positions [i, i + lanes) of a channels-last row into the planar
// rows `out` (channel ch's row at out + ch * width), through registers; bfloat16 widened as it
// is loaded. With `affine`, each value is its affine map: the same formula as written out
// (shared::affine_floor), in vectors, and of bfloat16 rows rounded to bfloat16 as it would be
// written.
template <class From>
void eight_to_planar(const From* row, std::int64_t i, std::int64_t c, std::int64_t first,
                     std::int64_t width, float* out, const AffineVectors* affine = nullptr) {
  constexpr int L = Simd::lanes;
  alignas(64) From positions[L * 8];
  const From* from = row + i * c + first;
  if (c != 8) {
    for (int p = 0; p < L; ++p) std::memcpy(positions + 8 * p, from + p * c, 8 * sizeof(From));
    from = positions;
  }
  Simd::V in[8], rows[8];
  for (int v = 0; v < 8; ++v) in[v] = Simd::load(from + v * L);
  if (affine)
    for (int v = 0; v < 8; ++v) {
      in[v] =
          affine_floor(affine->scale[first / 8], in[v], affine->shift[first / 8], affine->floor);
      if constexpr (std::is_same_v<From, bfloat16>) in[v] = Simd::rounded_to_bf16(in[v]);
    }
  Simd::to_channels(in, rows);
  for (int ch = 0; ch < 8; ++ch) Simd::store(out + (first + ch) * width + i, rows[ch]);
}

#if MESHTENSOR_TARGET_AVX512
// The 4 channels of 16 positions [i, i + 16) of a channels-last row into the planar rows `out`
// (bfloat16 channel pairs, read as floats' bits, come four to a position at 8 channels).
inline void four_to_planar(const float* row, std::int64_t i, std::int64_t width, float* out) {
  __m512 in[4];
  for (int v = 0; v < 4; ++v) in[v] = _mm512_loadu_ps(row + i * 4 + 16 * v);
  for (int ch = 0; ch < 4; ++ch) {
    // Channel ch of positions 0-7 from the first two vectors, of 8-15 from the other two.
    const __m512i index = _mm512_add_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
        _mm512_set1_epi32(ch));
    const __m512 low = _mm512_permutex2var_ps(in[0], index, in[1]);
    const __m512 high = _mm512_permutex2var_ps(in[2], index, in[3]);
    // The zero-masking form: GCC 12 warns of the plain one's undefined operand.
    _mm512_storeu_ps(out + ch * width + i, _mm512_maskz_shuffle_f32x4(0xffff, low, high, 0x44));
  }
}
#endif

// The n words at `in` (bfloat16 channel pairs read as floats, c pairs a position) mapped by `map`
// (2 c channels) into `out`: each half widened, mapped and rounded to bfloat16 as norm_affine
// writes it, in vectors of 16 words where their pairs repeat by the vector (c divides 16 or 16
// divides c), one by one elsewhere.
inline void map_bf16_pairs(const float* in, std::int64_t n, std::int64_t c,
                           const ChannelAffineIn<float>& map, float* out) {
  std::int64_t w = 0;
#if MESHTENSOR_TARGET_AVX512
  if (16 % c == 0 || c % 16 == 0) {
    using V = Simd::V;
    const std::int64_t patterns = c % 16 == 0 ? c / 16 : 1;
    VectorList even_scale, even_shift, odd_scale, odd_shift;
    alignas(64) float lanes[16];
    const auto vector_of = [&](std::int64_t k, int half, const std::vector<float>& of) {
      for (int lane = 0; lane < 16; ++lane) lanes[lane] = of[2 * ((16 * k + lane) % c) + half];
      return Simd::load(lanes);
    };
    for (std::int64_t k = 0; k < patterns; ++k) {
      even_scale.push_back(vector_of(k, 0, map.scale));
      even_shift.push_back(vector_of(k, 0, map.shift));
      odd_scale.push_back(vector_of(k, 1, map.scale));
      odd_shift.push_back(vector_of(k, 1, map.shift));
    }
    const V floor = _mm512_set1_ps(map.floor);
    const __m512i high_half = _mm512_set1_epi32(int(0xffff0000u));
    for (std::int64_t k = 0; w + 16 <= n; w += 16, k = (k + 1) % patterns) {
      const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(in + w));
      const V low = V(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, bits, 16)));
      const V high = V(_mm512_castsi512_ps(_mm512_and_si512(bits, high_half)));
      const V low_mapped =
          Simd::rounded_to_bf16(affine_floor(even_scale[k], low, even_shift[k], floor));
      const V high_mapped =
          Simd::rounded_to_bf16(affine_floor(odd_scale[k], high, odd_shift[k], floor));
      const __m512i words = _mm512_or_si512(
          _mm512_maskz_srli_epi32(0xffff, _mm512_castps_si512(__m512(low_mapped)), 16),
          _mm512_castps_si512(__m512(high_mapped)));
      _mm512_storeu_ps(out + w, _mm512_castsi512_ps(words));
    }
  }
#endif
  for (; w < n; ++w) {
    std::uint32_t bits;
    std::memcpy(&bits, in + w, sizeof bits);
    const std::int64_t pair = w % c;
    bfloat16 low, high;
    low.bits = std::uint16_t(bits & 0xffff);
    high.bits = std::uint16_t(bits >> 16);
    low = map(2 * pair, low);
    high = map(2 * pair + 1, high);
    bits = std::uint32_t(low.bits) | std::uint32_t(high.bits) << 16;
    std::memcpy(out + w, &bits, sizeof bits);
  }
}

}  // namespace detail

/// The plane [n1][n2][c] at `in` as [n1][c][format.width] at `out`; `row_stride` apart (floats)
/// where the c channels are some of a wider planar plane's (one part of a concatenation). A plane
/// of bfloat16 is widened as it is turned (exact): the float kernels read it with no float copy.
/// With `affine` (c channels), the plane turned is its affine map, computed on the way (a
/// bfloat16 plane's rounded to bfloat16, the values norm_affine would have written; bfloat16 pairs
/// read as floats, ChannelAffine::bf16_pairs, mapped half by half and rounded alike).
template <class From>
void to_planar(const From* in, std::int64_t n1, std::int64_t n2, std::int64_t c,
               const RowFormat& format, float* out, std::int64_t row_stride = 0,
               const ChannelAffine* affine = nullptr) {
  static_assert(std::is_same_v<From, float> || std::is_same_v<From, bfloat16>);
  if (row_stride == 0) row_stride = c * format.width;
  if constexpr (std::is_same_v<From, float>)
    if (affine && affine->bf16_pairs) {
      // Pairs of bfloat16 mapped a row at a time into words turned as they are.
      const ChannelAffineIn<float> map(*affine);
      std::vector<float> words(static_cast<std::size_t>(n2 * c));
      for (std::int64_t r = 0; r < n1; ++r) {
        detail::map_bf16_pairs(in + r * n2 * c, n2 * c, c, map, words.data());
        to_planar(words.data(), 1, n2, c, format, out + r * row_stride, row_stride);
      }
      return;
    }
  const std::int64_t after = std::max<std::int64_t>(0, format.width - format.before - n2);
  std::optional<ChannelAffineIn<float>> mapped;
  if (affine) mapped.emplace(*affine);
  const ChannelAffineIn<float>* map = affine ? &*mapped : nullptr;
  // Whole vectors of positions through registers where the channels come in eights (or, with
  // AVX-512, four: bfloat16 pairs read as floats, never mapped).
#if MESHTENSOR_TARGET_AVX512
  constexpr bool fours = std::is_same_v<From, float>;
#else
  constexpr bool fours = false;
#endif
  const bool through_registers = (c % 8 == 0 || (fours && c == 4 && !map));
  const std::int64_t whole = through_registers ? n2 / Simd::lanes * Simd::lanes : 0;
  std::optional<detail::AffineVectors> vectors;
  if (map && whole > 0) vectors.emplace(*map, c);
  const detail::AffineVectors* map_vectors = vectors ? &*vectors : nullptr;
  for (std::int64_t r = 0; r < n1; ++r) {
    const From* row = in + r * n2 * c;
    float* rows = out + r * row_stride;
#if MESHTENSOR_TARGET_AVX512
    if constexpr (fours)
      if (c == 4)
        for (std::int64_t i = 0; i < whole; i += Simd::lanes)
          detail::four_to_planar(row, i, format.width, rows + format.before);
#endif
    for (std::int64_t first = 0; first + 8 <= c && whole > 0; first += 8)
      for (std::int64_t i = 0; i < whole; i += Simd::lanes)
        detail::eight_to_planar(row, i, c, first, format.width, rows + format.before, map_vectors);
    for (std::int64_t ch = 0; ch < c; ++ch) {
      float* to = rows + ch * format.width;
      std::fill(to, to + format.before, 0.0f);
      if (map) {
        for (std::int64_t i = whole; i < n2; ++i)
          to[format.before + i] = float((*map)(ch, row[i * c + ch]));
      } else if constexpr (std::is_same_v<From, bfloat16>) {
        if (c == 1)
          cpu::to_float_run(row + whole, to + format.before + whole, n2 - whole);
        else
          for (std::int64_t i = whole; i < n2; ++i) to[format.before + i] = float(row[i * c + ch]);
      } else if (c == 1)  // already a channel's row (the first layer's input)
        std::memcpy(to + format.before + whole, row + whole, (n2 - whole) * sizeof(float));
      else  // as bits: the bfloat16 forward pass hands pairs of bfloat16 in as floats
        for (std::int64_t i = whole; i < n2; ++i)
          std::memcpy(to + format.before + i, row + i * c + ch, sizeof(float));
      std::fill(to + format.before + n2, to + format.before + n2 + after, 0.0f);
    }
  }
}

namespace detail {

// Channels [first, first + 8) of 16 positions [i, i + 16) of a bfloat16 channels-last row into
// the planar rows `out`, through float registers (a bfloat16 is the upper half of a float, so
// both conversions are exact shifts). With `affine` (AVX-512 only), each value is its affine map
// rounded to bfloat16, as norm_affine writes it.
inline void eight_to_planar(const bfloat16* row, std::int64_t i, std::int64_t c, std::int64_t first,
                            std::int64_t width, bfloat16* out,
                            const AffineVectors* affine = nullptr) {
#if MESHTENSOR_TARGET_AVX512
  alignas(64) bfloat16 positions[16 * 8];
  const bfloat16* from = row + i * c + first;
  if (c != 8) {
    for (int p = 0; p < 16; ++p) std::memcpy(positions + 8 * p, from + p * c, 8 * sizeof(bfloat16));
    from = positions;
  }
  Simd::V in[8], rows[8];
  for (int v = 0; v < 8; ++v) {  // two positions' 8 channels a vector
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + 16 * v));
    in[v] = Simd::V(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bits), 16));
  }
  if (affine)  // two positions' 8 channels a vector: the layout AffineVectors holds
    for (int v = 0; v < 8; ++v)
      in[v] = Simd::rounded_to_bf16(
          affine_floor(affine->scale[first / 8], in[v], affine->shift[first / 8], affine->floor));
  Simd::to_channels(in, rows);
  for (int ch = 0; ch < 8; ++ch)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (first + ch) * width + i),
                        _mm512_maskz_cvtepi32_epi16(
                            0xffff, _mm512_maskz_srli_epi32(0xffff, __m512i(rows[ch]), 16)));
#else
  if (affine) throw std::logic_error("internal: bfloat16 planes map in vectors on AVX-512 only");
  for (int p = 0; p < 16; ++p)
    for (int ch = 0; ch < 8; ++ch)
      out[(first + ch) * width + i + p] = row[(i + p) * c + first + ch];
#endif
}

#if MESHTENSOR_TARGET_AVX512
// The 64-bit pieces q0..q7 of a (0-7) and b (8-15).
inline __m512i pick(__m512i a, __m512i b, long long q0, long long q1, long long q2, long long q3,
                    long long q4, long long q5, long long q6, long long q7) {
  return _mm512_permutex2var_epi64(a, _mm512_setr_epi64(q0, q1, q2, q3, q4, q5, q6, q7), b);
}

// Channels [first, first + 8) of 32 positions [i, i + 32) of a bfloat16 channels-last row into
// the planar rows `out`, as 16-bit words: each vector takes 4 positions' 8 channels, a word permute
// groups them by channel (a channel's 4 positions in 64 bits), and an 8 x 8 transpose of those
// 64-bit pieces gives each channel its 32 positions (32 permutes for 512 bytes, where widening to
// float and back took five times the instructions: a fifth of the weight gradient's time).
inline void thirty_two_to_planar(const bfloat16* row, std::int64_t i, std::int64_t c,
                                 std::int64_t first, std::int64_t width, bfloat16* out) {
  const bfloat16* from = row + i * c + first;
  const auto chunk = [&](std::int64_t p) {  // position p's 8 channels, 128 bits
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + p * c));
  };
  // Word j of a permuted vector: channel j / 4 of position j % 4.
  const __m512i by_channel = _mm512_set_epi16(  // (from word 31 down to word 0)
      31, 23, 15, 7, 30, 22, 14, 6, 29, 21, 13, 5, 28, 20, 12, 4, 27, 19, 11, 3, 26, 18, 10, 2, 25,
      17, 9, 1, 24, 16, 8, 0);
  __m512i block[8];  // block[k]: positions 4k .. 4k + 3, then grouped by channel
  for (int k = 0; k < 8; ++k) {
    if (c == 8) {
      block[k] = _mm512_loadu_si512(from + 32 * k);
    } else {
      block[k] = _mm512_castsi128_si512(chunk(4 * k));
      block[k] = _mm512_inserti32x4(block[k], chunk(4 * k + 1), 1);
      block[k] = _mm512_inserti32x4(block[k], chunk(4 * k + 2), 2);
      block[k] = _mm512_inserti32x4(block[k], chunk(4 * k + 3), 3);
    }
    block[k] = _mm512_permutexvar_epi16(by_channel, block[k]);
  }
  // The transpose, in three rounds of pairs: 64-bit piece ch of block k ends as piece k of ch.
  __m512i pairs[4][2];  // blocks 2a, 2a + 1: channels 0-3, then 4-7, two pieces each
  for (int a = 0; a < 4; ++a) {
    pairs[a][0] = pick(block[2 * a], block[2 * a + 1], 0, 8, 1, 9, 2, 10, 3, 11);
    pairs[a][1] = pick(block[2 * a], block[2 * a + 1], 4, 12, 5, 13, 6, 14, 7, 15);
  }
  __m512i fours[2][2][2];  // blocks 4b .. 4b + 3, channels 4h + 2s and 4h + 2s + 1
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h) {
      fours[b][h][0] = pick(pairs[2 * b][h], pairs[2 * b + 1][h], 0, 1, 8, 9, 2, 3, 10, 11);
      fours[b][h][1] = pick(pairs[2 * b][h], pairs[2 * b + 1][h], 4, 5, 12, 13, 6, 7, 14, 15);
    }
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 2; ++s) {
      const std::int64_t ch = first + 4 * h + 2 * s;
      _mm512_storeu_si512(out + ch * width + i,
                          pick(fours[0][h][s], fours[1][h][s], 0, 1, 2, 3, 8, 9, 10, 11));
      _mm512_storeu_si512(out + (ch + 1) * width + i,
                          pick(fours[0][h][s], fours[1][h][s], 4, 5, 6, 7, 12, 13, 14, 15));
    }
}
#endif

}  // namespace detail

/// The same for a plane of bfloat16 (for the bfloat16 row kernels, AVX-512). With `affine` (c
/// channels), the plane turned is its affine map rounded to bfloat16, the values norm_affine
/// would have written.
inline void to_planar(const bfloat16* in, std::int64_t n1, std::int64_t n2, std::int64_t c,
                      const RowFormat& format, bfloat16* out, std::int64_t row_stride = 0,
                      const ChannelAffine* affine = nullptr) {
  if (row_stride == 0) row_stride = c * format.width;
  const std::int64_t after = std::max<std::int64_t>(0, format.width - format.before - n2);
  std::optional<ChannelAffineIn<float>> map;
  if (affine) map.emplace(*affine);
#if MESHTENSOR_TARGET_AVX512
  const bool vectors_map = true;
#else
  const bool vectors_map = false;
#endif
  const std::int64_t whole = c % 8 == 0 && (!map || vectors_map) ? n2 / 16 * 16 : 0;
  std::optional<detail::AffineVectors> vectors;
  if (map && whole > 0) vectors.emplace(*map, c);
  const detail::AffineVectors* map_vectors = vectors ? &*vectors : nullptr;
  // The padding as bytes (bfloat16 zero is all zero bits): std::fill of the class type stored
  // one value at a time.
  const auto zeros = [](bfloat16* to, std::int64_t n) {
    std::memset(static_cast<void*>(to), 0, static_cast<std::size_t>(n) * sizeof(bfloat16));
  };
  for (std::int64_t r = 0; r < n1; ++r) {
    const bfloat16* row = in + r * n2 * c;
    bfloat16* rows = out + r * row_stride;
    for (std::int64_t first = 0; first < c && whole > 0; first += 8) {
      std::int64_t i = 0;
#if MESHTENSOR_TARGET_AVX512
      for (; i + 32 <= whole && !map; i += 32)  // words permuted as they lie: never mapped
        detail::thirty_two_to_planar(row, i, c, first, format.width, rows + format.before);
#endif
      for (; i < whole; i += 16)
        detail::eight_to_planar(row, i, c, first, format.width, rows + format.before, map_vectors);
    }
    for (std::int64_t ch = 0; ch < c; ++ch) {
      bfloat16* to = rows + ch * format.width;
      zeros(to, format.before);
      if (map)
        for (std::int64_t i = whole; i < n2; ++i)
          to[format.before + i] = (*map)(ch, row[i * c + ch]);
      else if (c == 1)
        std::memcpy(to + format.before + whole, row + whole, (n2 - whole) * sizeof(bfloat16));
      else
        for (std::int64_t i = whole; i < n2; ++i) to[format.before + i] = row[i * c + ch];
      zeros(to + format.before + n2, after);
    }
  }
}

/// Eight channels' vectors of positions [0, n) (n at most a vector) into the channels-last row
/// `out` (c channels per position, these from channel `first` on); `around_cache`: whole aligned
/// vectors with streamed stores (stream_fence() before others read them). Inlined, so that the
/// rows can stay in registers.
__attribute__((always_inline)) inline void store_positions(const Simd::V (&rows)[8], std::int64_t n,
                                                           std::int64_t c, std::int64_t first,
                                                           float* out, bool around_cache = false) {
  constexpr int L = Simd::lanes;
  Simd::V by_position[8];
  Simd::to_positions(rows, by_position);
  if (c == 8 && n == L) {
    if (around_cache && reinterpret_cast<std::uintptr_t>(out) % sizeof(Simd::V) == 0)
      for (int v = 0; v < 8; ++v) Simd::stream(out + v * L, by_position[v]);
    else
      for (int v = 0; v < 8; ++v) Simd::store(out + v * L, by_position[v]);
    return;
  }
  alignas(64) float positions[L * 8];
  for (int v = 0; v < 8; ++v) Simd::store(positions + v * L, by_position[v]);
  for (std::int64_t p = 0; p < n; ++p)
    std::memcpy(out + p * c + first, positions + 8 * p, 8 * sizeof(float));
}

#if MESHTENSOR_TARGET_AVX512
/// The same into a bfloat16 row, each value rounded to nearest (ties to even) as bfloat16(float)
/// rounds it.
__attribute__((always_inline)) inline void store_positions(const Simd::V (&rows)[8], std::int64_t n,
                                                           std::int64_t c, std::int64_t first,
                                                           bfloat16* out,
                                                           bool around_cache = false) {
  constexpr int L = Simd::lanes;
  Simd::V by_position[8];
  Simd::to_positions(rows, by_position);
  __m256i rounded[8];
  for (int v = 0; v < 8; ++v) rounded[v] = narrowed_bf16(__m512(by_position[v]));
  if (c == 8 && n == L) {
    auto* to = reinterpret_cast<__m256i*>(out);
    if (around_cache && reinterpret_cast<std::uintptr_t>(out) % sizeof(__m256i) == 0)
      for (int v = 0; v < 8; ++v) _mm256_stream_si256(to + v, rounded[v]);
    else
      for (int v = 0; v < 8; ++v) _mm256_storeu_si256(to + v, rounded[v]);
    return;
  }
  alignas(64) bfloat16 positions[L * 8];
  std::memcpy(positions, rounded, sizeof positions);
  for (std::int64_t p = 0; p < n; ++p)
    std::memcpy(out + p * c + first, positions + 8 * p, 8 * sizeof(bfloat16));
}
#endif

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
