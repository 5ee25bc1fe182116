// Channels-last bfloat16 rows as words of position pairs: word x of channel ch holds the values
// at positions x * step + first and the one after it (low and high half, zero outside the row),
// channels innermost ([x][channel]). AVX512_BF16's dot product multiplies such words pairwise,
// so a word of the input against a word of the output gradient gives two positions' products of
// one weight (rows/form/channel_lanes_weight.hpp).
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {

namespace detail {

inline std::uint32_t pair_word(bfloat16 low, bfloat16 high) {
  return std::uint32_t(low.bits) | std::uint32_t(high.bits) << 16;
}

// Word x of a row's c channels, positions p and p + 1 both inside: 16 channels a vector, each
// widened to 32 bits with the next position's shifted above it.
inline void pair_words_inside(const bfloat16* at, std::int64_t c, std::uint32_t* to) {
  std::int64_t ch = 0;
#if MESHTENSOR_TARGET_AVX512
  for (; ch + 16 <= c; ch += 16) {
    // The zero-masking forms: GCC 12 warns of the plain ones' undefined operand.
    const __m512i low =
        _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256((const __m256i*)(at + ch)));
    const __m512i high =
        _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256((const __m256i*)(at + c + ch)));
    _mm512_storeu_si512(to + ch, _mm512_or_si512(low, _mm512_maskz_slli_epi32(0xffff, high, 16)));
  }
  for (; ch + 8 <= c; ch += 8) {
    const __m256i low = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(at + ch)));
    const __m256i high = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(at + c + ch)));
    _mm256_storeu_si256((__m256i*)(to + ch), _mm256_or_si256(low, _mm256_slli_epi32(high, 16)));
  }
#endif
  for (; ch < c; ++ch) to[ch] = pair_word(at[ch], at[c + ch]);
}

// Positions [0, n) of a row's c channels mapped by `map` as norm_affine writes them: as channel
// pairs read as floats' bits where c is even (map_bf16_pairs, in vectors), one by one elsewhere.
inline void mapped_row(const bfloat16* row, std::int64_t n, std::int64_t c,
                       const ChannelAffineIn<float>& map, bfloat16* out) {
  if (c % 2 == 0)
    return map_bf16_pairs(reinterpret_cast<const float*>(row), n * c / 2, c / 2, map,
                          reinterpret_cast<float*>(out));
  for (std::int64_t i = 0; i < n * c; ++i) out[i] = map(i % c, row[i]);
}

}  // namespace detail

/// Words x in [0, words) of a channels-last row of n positions and c channels into `to`
/// ([x][stride], the c channels first): word x pairs positions x * step + first and the next.
inline void pair_words(const bfloat16* row, std::int64_t n, std::int64_t c, std::int64_t first,
                       std::int64_t step, std::int64_t words, std::uint32_t* to,
                       std::int64_t stride) {
  const bfloat16 zero{};
  for (std::int64_t x = 0; x < words; ++x) {
    const std::int64_t p = first + x * step;
    std::uint32_t* out = to + x * stride;
    if (p >= 0 && p + 1 < n) {
      detail::pair_words_inside(row + p * c, c, out);
      continue;
    }
    const bfloat16* low = p >= 0 && p < n ? row + p * c : nullptr;
    const bfloat16* high = p + 1 >= 0 && p + 1 < n ? row + (p + 1) * c : nullptr;
    for (std::int64_t ch = 0; ch < c; ++ch)
      out[ch] = detail::pair_word(low ? low[ch] : zero, high ? high[ch] : zero);
  }
}

/// PlanarPlanesOf's turn into position-pair words: a row of `format.width` words per channel,
/// word x pairing box positions x - format.before and the next; a part's channels `first` words
/// into each word position. A part given as its affine map is mapped first, a row at a time.
struct TurnPairs {
  static std::int64_t part_offset(std::int64_t first, const RowFormat&) { return first; }
  static void turn(const bfloat16* rows, std::int64_t n1, std::int64_t n2, std::int64_t c,
                   const RowFormat& format, std::uint32_t* to, std::int64_t row_stride,
                   const ChannelAffine* affine) {
    std::optional<ChannelAffineIn<float>> map;
    Buffer<bfloat16> mapped(affine ? static_cast<std::size_t>(n2 * c) : 0);
    if (affine) map.emplace(*affine);
    const std::int64_t stride = row_stride / format.width;  // the plane's channels
    for (std::int64_t r = 0; r < n1; ++r) {
      const bfloat16* row = rows + r * n2 * c;
      if (affine) {
        detail::mapped_row(row, n2, c, *map, mapped.data());
        row = mapped.data();
      }
      pair_words(row, n2, c, -format.before, 1, format.width, to + r * row_stride, stride);
    }
  }
};

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
