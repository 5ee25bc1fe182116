// The row kernels' passes in one instruction set's form (rows/conv.hpp lists the passes and
// chooses the form); with the other parts of that form, rows/form/all.hpp: no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET {
namespace detail {

constexpr int tile_channels = 8;  // output channels the kernels take at a time (c_out a multiple)
// Output channels per register tile. Forward: NB vectors of positions times this many
// accumulators, NB inputs and a weight fit the registers (AVX-512: 3 x 8 of 32; AVX2: 2 x 4 of
// 16). Weight gradient: 3 taps along the row times weight_channels, 3 inputs and a gradient
// (AVX2: 3 x 4, where the loads then bound it; 3 x 2 is no faster).
constexpr int register_channels = Simd::registers >= 32 ? 8 : 4;
constexpr int weight_channels = Simd::registers >= 32 ? 8 : 4;

// Positions a vector of T holds: float one a lane; bfloat16 two, a pair a lane.
template <class T>
constexpr int vector_positions = L* int(sizeof(float) / sizeof(T));

template <class T>
__attribute__((always_inline)) inline V load_vector(const T* p) {
  return Simd::load(reinterpret_cast<const float*>(p));
}

// acc += x * y lane by lane (float), or pair by pair into each float lane (bfloat16: AVX512_BF16's
// dot product, which gives each lane two products at the instruction cost of one).
template <class T>
__attribute__((always_inline)) inline V multiply_add(V x, V y, V acc) {
  if constexpr (std::is_same_v<T, float>) {
    return Simd::fma(x, y, acc);
  } else {
#if MESHTENSOR_TARGET_AVX512_BF16
    return V(_mm512_dpbf16_ps(__m512(acc), __m512bh(x), __m512bh(y)));
#else
    static_assert(sizeof(T) == 0, "bfloat16 row kernels need AVX512_BF16");
#endif
  }
}
#if MESHTENSOR_TARGET_AVX512_BF16
constexpr bool bf16_rows = true;
#else
constexpr bool bf16_rows = false;
#endif

// What one output row reads: per tap and input channel, where that channel's box row starts
// (output 0's read) and the weights of the output channels.
struct TapRead {
  const float* x;  // [width], read from position o on for output o
  const float* w;  // [c_out]
};

// The reads of output row o1 of a plane whose taps k0 read `planes[k0]`, in `reads` (kept by the
// caller: one list per row, reused).
inline void tap_reads(const ConvGeometry& g, const RowGeometry& r,
                      const std::vector<const float*>& planes, std::int64_t o1, const float* weight,
                      std::vector<TapRead>& reads) {
  reads.clear();
  for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
    if (!planes[k0]) continue;
    for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
      const std::int64_t i1 = g.taps[1].reads(o1, k1);
      if (i1 < 0 || i1 >= g.in[1]) continue;
      const float* row = planes[k0] + i1 * g.c_in * r.box.width + r.shift;
      const float* w = weight + (k0 * g.kernel[1] + k1) * g.kernel[2] * g.c_in * g.c_out;
      for (std::int64_t ci = 0; ci < g.c_in; ++ci)
        for (std::int64_t k2 = 0; k2 < g.kernel[2]; ++k2)
          reads.push_back(
              {row + ci * r.box.width + k2 * r.dilation, w + (k2 * g.c_in + ci) * g.c_out});
    }
  }
}

// A register tile's channels' vectors of positions [v*L, v*L + n) (rows of `planar`) into the
// channels-last row `out`, from channel `first` on (tiles of other than 8 channels: AVX2's 4).
template <int TC, class T>
void store_vector(const float (&planar)[TC][L], std::int64_t v, std::int64_t n, std::int64_t c,
                  std::int64_t first, T* out) {
  for (std::int64_t p = 0; p < n; ++p)
    for (int ch = 0; ch < TC; ++ch) out[(v * L + p) * c + first + ch] = planar[ch][p];
}

// Which taps k1 of output row o1 read inside the box, as bits (the first 64).
inline std::uint64_t taps_inside(const ConvGeometry& g, std::int64_t o1) {
  std::uint64_t bits = 0;
  for (std::int64_t k1 = 0; k1 < std::min<std::int64_t>(g.kernel[1], 64); ++k1) {
    const std::int64_t i1 = g.taps[1].reads(o1, k1);
    if (i1 >= 0 && i1 < g.in[1]) bits |= std::uint64_t{1} << k1;
  }
  return bits;
}

// Memory to bring into the cache a piece at a time while the tiles compute: the next plane's rows,
// which turning them would otherwise wait for (at 64^3 a bfloat16 weight gradient spent a sixth
// of its time turning rows that came from memory).
class Prefetch {
 public:
  Prefetch() = default;
  Prefetch(const void* from, std::int64_t bytes, std::int64_t pieces)
      : at_(static_cast<const char*>(from)),
        end_(at_ + bytes),
        lines_per_piece_((bytes / 64 + pieces) / std::max<std::int64_t>(1, pieces)) {}
  void next_piece() {
    for (std::int64_t l = 0; l < lines_per_piece_ && at_ < end_; ++l, at_ += 64)
      __builtin_prefetch(at_, /*read*/ 0, /*into the second-level cache*/ 2);
  }

 private:
  const char* at_ = nullptr;
  const char* end_ = nullptr;
  std::int64_t lines_per_piece_ = 0;
};

// Where a register tile's outputs go: a row of the output part holding them, `channels` a
// position, the tile's from channel `first` of that part on.
template <class T>
struct TileOut {
  T* row;
  std::int64_t channels, first;
};

// Outputs [v0*L, (v0+NB)*L) of one row, channels [first, first + register_channels), into `out`
// (channels last; `around_cache`: with streamed stores where they can be). Each read's input
// starts `shift` floats past its `x`. P: the products' type (multiply_add), T: the output's.
template <class P, class T, int NB>
void forward_tile(const ConvGeometry& g, const std::vector<TapRead>& reads, std::int64_t shift,
                  std::int64_t v0, std::int64_t first, const TileOut<T>& out, bool around_cache) {
  shift += v0 * L;
  V acc[NB][register_channels];
  for (int b = 0; b < NB; ++b)
    for (int c = 0; c < register_channels; ++c) acc[b][c] = Simd::zero();
  for (const TapRead& read : reads) {
    V xv[NB];
    for (int b = 0; b < NB; ++b) xv[b] = Simd::load(read.x + shift + b * L);
#pragma GCC unroll 8
    for (int c = 0; c < register_channels; ++c) {
      const V wv = Simd::broadcast(read.w + first + c);
      for (int b = 0; b < NB; ++b) acc[b][c] = multiply_add<P>(xv[b], wv, acc[b][c]);
    }
  }
  // Eight channels: transposed straight from the registers (through memory, a tile's overhead
  // costs the first layer, 27 taps a tile, a tenth of its time).
  if constexpr (register_channels == 8) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const std::int64_t v = v0 + b, n = std::min<std::int64_t>(L, g.out[2] - v * L);
      V rows[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) rows[c] = acc[b][c];
      if (n > 0)
        store_positions(rows, n, out.channels, out.first, out.row + v * L * out.channels,
                        around_cache);
    }
    return;
  }
  // Through memory, by value: a loop whose accumulators have their address taken keeps them in
  // memory too (GCC 12 with AVX2 stores them on every pass).
  alignas(64) float planar[NB][register_channels][L];
  for (int b = 0; b < NB; ++b)
    for (int c = 0; c < register_channels; ++c) Simd::store(planar[b][c], acc[b][c]);
  for (int b = 0; b < NB; ++b) {
    const std::int64_t v = v0 + b, n = std::min<std::int64_t>(L, g.out[2] - v * L);
    if (n > 0) store_vector<register_channels>(planar[b], v, n, out.channels, out.first, out.row);
  }
}

constexpr int forward_vectors = Simd::registers >= 32 ? 3 : 2;  // vectors of positions a tile

// A row in tiles of NB vectors; a last tile of one vector (whose broadcasts outnumber its
// multiply-adds' other operands) is avoided by ending on two tiles of two.
template <class P, class T, int NB>
void forward_row(const ConvGeometry& g, const RowGeometry& r, const std::vector<TapRead>& reads,
                 std::int64_t shift, std::int64_t first, const TileOut<T>& out, bool around_cache) {
  std::int64_t v = 0;
  const std::int64_t left_over = NB > 2 && r.vectors % NB == 1 && r.vectors > NB ? NB + 1 : 0;
  for (; v + NB <= r.vectors - left_over; v += NB)
    forward_tile<P, T, NB>(g, reads, shift, v, first, out, around_cache);
  for (; v + 2 <= r.vectors; v += 2)
    forward_tile<P, T, 2>(g, reads, shift, v, first, out, around_cache);
  if (v < r.vectors) forward_tile<P, T, 1>(g, reads, shift, v, first, out, around_cache);
}

// Which output part and which of its channels each register tile's channels [first, first +
// register_channels) go to, tile by tile.
template <class T>
std::vector<std::array<std::int64_t, 2>> tile_parts(const ChannelParts<T>& output) {
  std::vector<std::array<std::int64_t, 2>> at;
  for (std::size_t j = 0; j < output.size(); ++j)
    for (std::int64_t c = 0; c < output.channels[j]; c += register_channels)
      at.push_back({std::int64_t(j), c});
  return at;
}

// Output rows per band (planar_planes.hpp): as many as keep what a band of rows touches in three
// quarters of the second-level cache — the rows of the kernel[0] planes it reads, turned
// (`box_bytes` a position and channel), the raw rows of the plane turned next, and
// `out_row_bytes` per output row: whole planes that overflow the cache run slower. At 8 channels
// and 2 MiB, 64^3 is one band (whole planes) and 128^3 two. KernelPolicy::row_bands -1 takes whole
// planes, N bands of N rows (tests).
inline std::int64_t band_rows(const ConvGeometry& g, const RowGeometry& r, std::int64_t box_bytes,
                              std::int64_t in_bytes, std::int64_t out_row_bytes) {
  const std::int64_t plane = std::max<std::int64_t>(1, g.out[1]);
  const std::int64_t set = current_processor().settings().kernels.row_bands;
  if (set < 0) return plane;
  if (set > 0) return std::min<std::int64_t>(set, plane);
  const std::int64_t budget = second_level_cache_bytes() * 3 / 4;
  const Taps& t = g.taps[1];
  const std::int64_t turned_row = g.kernel[0] * g.c_in * r.box.width * box_bytes;
  const std::int64_t fixed = turned_row * (g.kernel[1] - 1) * std::max<std::int64_t>(1, t.dilation);
  const std::int64_t per_row =
      t.stride * (turned_row + g.in[2] * g.c_in * in_bytes) + out_row_bytes;
  const std::int64_t most = std::min(plane, std::max<std::int64_t>(8, (budget - fixed) / per_row));
  const std::int64_t bands = (plane + most - 1) / most;
  return (plane + bands - 1) / bands;  // bands of equal size (a short last one turns as many)
}

// Prefetches (in `pieces`) of `rows` of the input plane output plane q's last tap reads: the one
// it does not share with the plane before it, where that is inside the box.
template <class In>
void prefetch_next_rows(const ConvGeometry& g, const ChannelParts<const In>& input, std::int64_t q,
                        PlaneRows rows, std::int64_t pieces, std::vector<Prefetch>& next) {
  const std::int64_t i = g.taps[0].reads(q % g.out[0], g.kernel[0] - 1);
  if (i < 0 || i >= g.in[0]) return;
  for (std::size_t j = 0; j < input.size(); ++j) {
    const std::int64_t part_row = g.in[2] * input.channels[j];
    next.emplace_back(input.data[j] + ((q / g.out[0] * g.in[0] + i) * g.in[1] + rows.lo) * part_row,
                      (rows.hi - rows.lo) * part_row * std::int64_t(sizeof(In)), pieces);
  }
}

// Rows `band` of output plane q from its taps' planes `read` (`reads`: the list of a row, reused).
template <class P, class T>
void forward_rows(const ConvGeometry& g, const RowGeometry& r,
                  const std::vector<const float*>& read, const float* weight,
                  const std::vector<std::array<std::int64_t, 2>>& tiles,
                  const ChannelParts<T>& output, std::int64_t q, PlaneRows band,
                  std::vector<Prefetch>& next, std::vector<TapRead>& reads, bool around_cache) {
  const auto [lo, hi] = band;
  const std::int64_t row_step = g.taps[1].stride * g.c_in * r.box.width;
  std::uint64_t reading = ~std::uint64_t{0};  // the previous row's taps k1 inside the box
  std::int64_t shift = 0;                     // where this row's reads start past the list's
  for (std::int64_t o1 = lo; o1 < hi; ++o1) {
    for (Prefetch& p : next) p.next_piece();
    const std::int64_t row = (q * g.out[1] + o1) * g.out[2];  // positions before this row's
    // A row whose taps read inside the box as the previous row's did reads the same list a
    // row further on (shifted as the tiles read it: rewriting every read's pointer cost an
    // eighth of the 8 -> 8 forward pass at 64^3).
    const std::uint64_t now = taps_inside(g, o1);
    if (now == reading && o1 > lo && g.kernel[1] <= 64) {
      shift += row_step;
    } else {
      tap_reads(g, r, read, o1, weight, reads);
      shift = 0;
    }
    reading = now;
    if (reads.empty()) {
      for (std::size_t j = 0; j < output.size(); ++j) {
        T* out = output.data[j] + row * output.channels[j];
        std::fill(out, out + g.out[2] * output.channels[j], T(0.0f));
      }
      continue;
    }
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      const auto [j, first_in_part] = tiles[t];
      const TileOut<T> out{output.data[j] + row * output.channels[j], output.channels[j],
                           first_in_part};
      forward_row<P, T, forward_vectors>(g, r, reads, shift, std::int64_t(t) * register_channels,
                                         out, around_cache);
    }
  }
}

// Output planes [a, b) (plane q is batch q / out0, first-dim index q % out0), the input read and
// the output written in parts along the channels (register_channels a part at least). Products P
// of bfloat16 come from a geometry whose input "channels" are pairs of bfloat16 channels, one
// float's bits each (the layout AVX512_BF16's dot product reads), as are the weights; an input In
// of bfloat16 is widened as its planes are turned (float products).
template <class P, class T, class In>
void forward_planes(const ConvGeometry& g, const ChannelParts<const In>& input, const float* weight,
                    const ChannelParts<T>& output, std::int64_t a, std::int64_t b,
                    std::int64_t band, PlanarPlanes& planes, bool around_cache) {
  const RowGeometry r = row_geometry(g);
  std::vector<TapRead> reads;  // (reused: one list per row)
  const auto tiles = tile_parts(output);
  std::vector<Prefetch> next;
  for (std::int64_t lo = 0; lo < g.out[1]; lo += band) {
    const std::int64_t hi = std::min(g.out[1], lo + band);
    const PlaneRows rows = rows_read(g, lo, hi);
    for (std::int64_t q = a; q < b; ++q) {
      const auto read = planes.read_by(input, q / g.out[0], q % g.out[0], rows);
      // The band's rows of the input plane the next output plane's last tap reads, the one it
      // does not share.
      next.clear();
      if (q + 1 < b) prefetch_next_rows(g, input, q + 1, rows, hi - lo, next);
      forward_rows<P, T>(g, r, read, weight, tiles, output, q, {lo, hi}, next, reads, around_cache);
    }
  }
}

// forward_planes over all output planes, a part of them on each of the processor's compute threads
// (the bands chosen here, outside the threads, from the calling processor's settings).
template <class P, class T, class In>
void forward_on_threads(const ConvGeometry& g, const ChannelParts<const In>& input,
                        const float* weight, const ChannelParts<T>& output, bool around_cache) {
  const RowGeometry r = row_geometry(g);
  const std::int64_t band =
      band_rows(g, r, sizeof(float), sizeof(In), g.out[2] * g.c_out * std::int64_t(sizeof(T)));
  on_plane_parts(
      g.batch * g.out[0], [&] { return PlanarPlanes(g, r.box); },
      [&](PlanarPlanes& planes, std::int64_t a, std::int64_t b) {
        forward_planes<P, T>(g, input, weight, output, a, b, band, planes, around_cache);
        if (around_cache) stream_fence();
      });
}

// Weight-gradient sums of taps (k0, k1, *) and input channel ci over rows [a, b) of one output
// plane, output channels [first, first + weight_channels), added lane by lane to `lanes`
// ([k2][c_in][c_out][L]).
template <class T, int K2>
void weight_tile(const ConvGeometry& g, const RowGeometry& r, const T* plane, const T* grad_plane,
                 std::int64_t k1, std::int64_t ci, std::int64_t first, std::int64_t a,
                 std::int64_t b, float* lanes) {
  constexpr int P = vector_positions<T>;
  V acc[K2][weight_channels];
  for (int k = 0; k < K2; ++k)
    for (int c = 0; c < weight_channels; ++c) acc[k][c] = Simd::zero();
  // Rows [a, b) whose tap k1 reads inside the box, as pointers that advance by a fixed step.
  const Taps& t = g.taps[1];
  const std::int64_t first_read = t.origin + k1 * t.dilation;  // the box row o1 = 0 reads
  a = std::max(a, ceil_div(-first_read, t.stride));
  b = std::min(b, floor_div(g.in[1] - 1 - first_read, t.stride) + 1);
  const T* x = plane + ((first_read + a * t.stride) * g.c_in + ci) * r.box.width + r.shift;
  const T* go = grad_plane + (a * g.c_out + first) * r.outputs.width;
  for (std::int64_t o1 = a; o1 < b; ++o1) {
    for (std::int64_t v = 0; v < r.vectors; ++v) {
      V xv[K2];
      for (int k = 0; k < K2; ++k) xv[k] = load_vector(x + v * P + k * r.dilation);
#pragma GCC unroll 8
      for (int c = 0; c < weight_channels; ++c) {
        V gv = load_vector(go + c * r.outputs.width + v * P);
        Simd::keep_in_register(gv);  // loaded once for its K2 uses, not once per use
        for (int k = 0; k < K2; ++k) acc[k][c] = multiply_add<T>(xv[k], gv, acc[k][c]);
      }
    }
    x += t.stride * g.c_in * r.box.width;
    go += g.c_out * r.outputs.width;
  }
  for (int k = 0; k < K2; ++k)
    for (int c = 0; c < weight_channels; ++c) {
      float* to = lanes + ((k * g.c_in + ci) * g.c_out + first + c) * L;
      Simd::store(to, Simd::add(Simd::load(to), acc[k][c]));
    }
}

// Rows of an output plane per weight tile: long enough that a tile's setup and its sums' update
// cost little beside its multiply-adds, short enough that the cache holding them feeds the tile
// while every tap and input channel passes over them. Where 512-bit multiply-adds run as two
// halves (Zen 4), the second-level cache keeps up: 128 KiB. Where they run at full rate (Zen 5,
// Intel's server cores), a tile takes twice the data a cycle and the second-level cache does not:
// blocks of two thirds of the first-level data cache. AVX2 keeps 128 KiB.
template <class T>
std::int64_t weight_block_rows(const ConvGeometry& g, const RowGeometry& r) {
  static const bool full_rate_512 = Simd::lanes == 16 && !half_width_fma_at_full_rate();
  static const std::int64_t block_bytes =
      full_rate_512 ? first_level_data_cache_bytes() * 2 / 3 : std::int64_t{128} << 10;
  const std::int64_t bytes_per_row =
      std::int64_t{sizeof(T)} * std::min<std::int64_t>(g.c_out, weight_channels) * r.outputs.width;
  return std::max<std::int64_t>(1, block_bytes / bytes_per_row);
}

// Weight tiles per `rows` rows of an output plane (weight_plane's calls of weight_tile, bounded
// above).
inline std::int64_t weight_tiles_per_band(const ConvGeometry& g, std::int64_t block,
                                          std::int64_t rows) {
  return (rows + block - 1) / block * ((g.c_out + weight_channels - 1) / weight_channels) *
         g.kernel[0] * g.kernel[1] * g.c_in;
}

template <class T, int K2>
void weight_plane(const ConvGeometry& g, const RowGeometry& r, const std::vector<const T*>& planes,
                  const T* grad_plane, PlaneRows band, float* lanes, std::vector<Prefetch>& next) {
  const std::int64_t block = weight_block_rows<T>(g, r);
  const std::int64_t tap_size = K2 * g.c_in * g.c_out * L;
  for (std::int64_t a = band.lo; a < band.hi; a += block)
    for (std::int64_t first = 0; first < g.c_out; first += weight_channels)
      for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
        if (!planes[k0]) continue;
        // Taps k1 innermost: they read the same few input rows, from the first-level cache.
        for (std::int64_t ci = 0; ci < g.c_in; ++ci)
          for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
            for (Prefetch& p : next) p.next_piece();
            weight_tile<T, K2>(g, r, planes[k0], grad_plane, k1, ci, first, a,
                               std::min(band.hi, a + block),
                               lanes + (k0 * g.kernel[1] + k1) * tap_size);
          }
      }
}

// What a thread of the weight gradient keeps: its planes, the output gradient's plane in planar
// form, and its sums lane by lane (float; each lane sums a block's rows in registers first).
template <class T>
struct WeightState {
  PlanarPlanesOf<T> planes;
  Buffer<T> grad_plane;
  Buffer<float> lanes;
};

// The elements of WeightState's grad_plane: an output gradient plane, turned.
inline std::int64_t weight_grad_plane(const ConvGeometry& g, const RowGeometry& r) {
  return g.out[1] * g.c_out * r.outputs.width;
}

template <class T, int K2, class In>
void weight_planes(const ConvGeometry& g, const RowGeometry& r, const ChannelParts<const In>& input,
                   const In* grad_output, std::int64_t a, std::int64_t b, std::int64_t band,
                   WeightState<T>& state) {
  const std::int64_t out_plane = g.out[1] * g.out[2] * g.c_out, out_row = g.out[2] * g.c_out;
  std::vector<Prefetch> next;
  for (std::int64_t lo = 0; lo < g.out[1]; lo += band) {
    const std::int64_t hi = std::min(g.out[1], lo + band);
    const PlaneRows rows = rows_read(g, lo, hi);
    const std::int64_t tiles = weight_tiles_per_band(g, weight_block_rows<T>(g, r), hi - lo);
    for (std::int64_t q = a; q < b; ++q) {
      const auto read = state.planes.read_by(input, q / g.out[0], q % g.out[0], rows);
      T* grad_rows = state.grad_plane.data() + lo * g.c_out * r.outputs.width;
      to_planar(grad_output + q * out_plane + lo * out_row, hi - lo, g.out[2], g.c_out, r.outputs,
                grad_rows);
      // The band's rows of the next plane's output gradient, and of the input plane its last tap
      // reads (the one the planes it shares with this one do not hold).
      next.clear();
      if (q + 1 < b) {
        next.emplace_back(grad_output + (q + 1) * out_plane + lo * out_row,
                          (hi - lo) * out_row * std::int64_t(sizeof(In)), tiles);
        prefetch_next_rows(g, input, q + 1, rows, tiles, next);
      }
      weight_plane<T, K2>(g, r, read, state.grad_plane.data(), {lo, hi}, state.lanes.data(), next);
    }
  }
}

// The weight gradient on the planar kernel, in T's vectors, from operands In (bfloat16 operands
// of float vectors widened as their planes are turned).
template <class T, class In = T>
void planar_backward_weight(const ConvGeometry& g, const ChannelParts<const In>& input,
                            const In* grad_output, double* grad_weight) {
  const RowGeometry r = row_geometry(g, vector_positions<T>);
  const std::size_t size = static_cast<std::size_t>(conv_weight_size(g));
  // Each band's rows of the output gradient, raw and turned, beside the input's (chosen here,
  // outside the threads, as forward_on_threads does).
  const std::int64_t band = band_rows(g, r, sizeof(T), sizeof(In),
                                      g.out[2] * g.c_out * std::int64_t(sizeof(In)) +
                                          g.c_out * r.outputs.width * std::int64_t(sizeof(T)));
  auto states = on_plane_parts(
      g.batch * g.out[0],
      [&] {
        return WeightState<T>{PlanarPlanesOf<T>(g, r.box),
                              Buffer<T>(static_cast<std::size_t>(weight_grad_plane(g, r))),
                              Buffer<float>(size * L, 0.0f)};
      },
      [&](WeightState<T>& state, std::int64_t a, std::int64_t b) {
        if (g.kernel[2] == 1)
          return weight_planes<T, 1>(g, r, input, grad_output, a, b, band, state);
        if (g.kernel[2] == 2)
          return weight_planes<T, 2>(g, r, input, grad_output, a, b, band, state);
        weight_planes<T, 3>(g, r, input, grad_output, a, b, band, state);
      });
  // The parts' sums in a fixed order: the same bits on every run.
  for (const WeightState<T>& state : states)
    for (std::size_t i = 0; i < size; ++i) {
      double sum = 0;
      for (int lane = 0; lane < L; ++lane) sum += state.lanes[i * L + lane];
      grad_weight[i] += sum;
    }
}

}  // namespace detail

/// Whether the forward kernel can run `g` (and the input gradient's, the reversed `g`): ordinary
/// taps, output channels in eights, at most `few` channels on one side, rows of at least a vector.
inline bool takes(const ConvGeometry& g, std::int64_t few = 8) {
  return enabled() && detail::ordinary(g) && g.c_out % detail::tile_channels == 0 &&
         std::min(g.c_in, g.c_out) <= few && g.kernel[0] * g.kernel[1] * g.kernel[2] > 1 &&
         g.out[2] >= detail::L && g.batch * g.out[0] * g.out[1] > 0;
}

/// Whether each pass runs on these kernels rather than oneDNN's, where they are the faster
/// (bench/RESULTS.md, "Figures behind the kernels' choices"): forward where the output has 8
/// channels or the input fewer than 8; the input gradient wherever the reversed convolution fits;
/// the weight gradient wherever the forward pass fits.
inline bool fits_forward(const ConvGeometry& g) {
  return takes(g) && (g.c_out == detail::tile_channels || g.c_in < 8);
}

inline bool fits_backward_input(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.taps[d].stride != 1 && g.kernel[d] > 1) return false;
  ConvGeometry reversed = g;
  std::swap(reversed.c_in, reversed.c_out);
  reversed.out[2] = g.in[2];
  return takes(reversed);
}

inline bool fits_backward_weight(const ConvGeometry& g, std::int64_t few = 8) {
  return takes(g, few) && g.kernel[2] <= 3;
}

/// Whether the passes below take operands in these parts along the channels: output parts (the
/// forward pass's output, the input gradient) of whole register tiles.
template <class T>
bool takes_output_parts(const ChannelParts<T>& parts) {
  return parts.parts_of(detail::register_channels);
}

/// output = the convolution of input with weight, for shapes takes(g) accepts, the input read and
/// the output written in parts along the channels (a concatenation read as its parts; output parts
/// as takes_output_parts).
inline void conv_forward(const ConvGeometry& g, const ChannelParts<const float>& input,
                         const float* weight, const ChannelParts<float>& output,
                         OutputStores stores = OutputStores::by_size) {
  using namespace detail;
  forward_on_threads<float>(g, input, weight, output, writes_around_cache(g, stores));
}

/// Whether the forward pass below runs g on the first layer's kernel, channels last in 256-bit
/// vectors: where those are the widest or as fast as 512-bit ones (there it beats the planar
/// kernel).
inline bool runs_one_channel_forward(const ConvGeometry& g) {
  return fits_one_channel_forward(g) && (Simd::lanes == 8 || half_width_fma_at_full_rate());
}
/// Whether it fits g and runs it on the planar kernel, which reads its input's planes through
/// PlanarPlanes (so also in parts, mapped ones included).
inline bool forward_reads_planes(const ConvGeometry& g) {
  return fits_forward(g) && !runs_one_channel_forward(g);
}

/// output = the convolution of input with weight, for shapes takes(g) accepts.
inline void conv_forward(const ConvGeometry& g, const float* input, const float* weight,
                         float* output, OutputStores stores = OutputStores::by_size) {
  using namespace detail;
  const bool around_cache = writes_around_cache(g, stores);
  if (runs_one_channel_forward(g))
    return conv_forward_one_channel(g, input, weight, output, around_cache);
  conv_forward(g, ChannelParts<const float>(input, g.c_in), weight,
               ChannelParts<float>(output, g.c_out), stores);
}

namespace detail {

// The convolution whose forward pass is g's input gradient: taps flipped, channels swapped.
inline ConvGeometry reversed(const ConvGeometry& g) {
  ConvGeometry r = g;
  r.in = g.out;
  r.out = g.in;
  std::swap(r.c_in, r.c_out);
  for (int d = 0; d < 3; ++d) {
    const std::int64_t dilation = g.kernel[d] > 1 ? g.taps[d].dilation : 1;
    r.taps[d] = Taps{false, -g.taps[d].origin - (g.kernel[d] - 1) * dilation, 1, dilation};
  }
  return r;
}

template <class T>
Buffer<T> reversed_weight(const ConvGeometry& g, const T* weight) {
  const std::int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  Buffer<T> reversed(static_cast<std::size_t>(taps * g.c_in * g.c_out));
  for (std::int64_t k = 0; k < taps; ++k)
    for (std::int64_t ci = 0; ci < g.c_in; ++ci)
      for (std::int64_t co = 0; co < g.c_out; ++co)
        reversed[((taps - 1 - k) * g.c_out + co) * g.c_in + ci] =
            weight[(k * g.c_in + ci) * g.c_out + co];
  return reversed;
}

}  // namespace detail

/// grad_input (over the box) = the gradient of the forward pass's output with respect to its
/// input, for shapes fits_backward_input(g) takes: the forward pass of the reversed convolution,
/// which reads the output gradient through the taps flipped and the channels swapped.
inline void conv_backward_input(const ConvGeometry& g, const float* grad_output,
                                const float* weight, float* grad_input,
                                OutputStores stores = OutputStores::by_size) {
  conv_forward(detail::reversed(g), grad_output, detail::reversed_weight(g, weight).data(),
               grad_input, stores);
}

/// The same with grad_input written in parts along the channels (takes_output_parts): the
/// gradients of a concatenation's parts.
inline void conv_backward_input(const ConvGeometry& g, const float* grad_output,
                                const float* weight, const ChannelParts<float>& grad_input,
                                OutputStores stores = OutputStores::by_size) {
  conv_forward(detail::reversed(g), ChannelParts<const float>(grad_output, g.c_out),
               detail::reversed_weight(g, weight).data(), grad_input, stores);
}

/// Whether the bfloat16 passes below run `g`: where the float ones do.
inline bool fits_forward_bf16(const ConvGeometry& g) { return fits_forward(g); }
inline bool fits_backward_input_bf16(const ConvGeometry& g) { return fits_backward_input(g); }

namespace detail {

// The weights of a bfloat16 pass, widened (the float products' form).
inline Buffer<float> widened(const bfloat16* weight, std::int64_t n) {
  Buffer<float> w(static_cast<std::size_t>(n));
  cpu::to_float_run(weight, w.data(), n);
  return w;
}

// Whether every part's channels come in pairs (what the dot products read).
inline bool in_pairs(const ChannelParts<const bfloat16>& parts) {
  for (const std::int64_t c : parts.channels)
    if (c % 2 != 0) return false;
  return true;
}

#if MESHTENSOR_TARGET_AVX512_BF16
// The forward pass in dot products: channels-last bfloat16 operands read as floats' bits, one
// "channel" per pair of channels (in_pairs), the weights paired alike.
inline void forward_in_dot_products(const ConvGeometry& g,
                                    const ChannelParts<const bfloat16>& input,
                                    const bfloat16* weight, const ChannelParts<bfloat16>& output,
                                    bool around_cache) {
  ConvGeometry pairs = g;
  pairs.c_in = g.c_in / 2;
  const std::int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
  Buffer<float> words(static_cast<std::size_t>(taps * pairs.c_in * g.c_out));
  for (std::int64_t k = 0; k < taps; ++k)
    for (std::int64_t j = 0; j < pairs.c_in; ++j)
      for (std::int64_t co = 0; co < g.c_out; ++co) {
        const std::int64_t even = (k * g.c_in + 2 * j) * g.c_out + co;
        const std::uint32_t bits = weight[even].bits | std::uint32_t(weight[even + g.c_out].bits)
                                                           << 16;
        std::memcpy(&words[(k * pairs.c_in + j) * g.c_out + co], &bits, sizeof bits);
      }
  // A part given as its map is mapped pair by pair as its planes are turned (to_planar).
  std::vector<ChannelAffine> pair_maps(input.size());
  ChannelParts<const float> words_in;
  for (std::size_t i = 0; i < input.size(); ++i) {
    if (input.affine_of(i)) {
      pair_maps[i] = *input.affine_of(i);
      pair_maps[i].bf16_pairs = true;
    }
    words_in.add(reinterpret_cast<const float*>(input.data[i]), input.channels[i] / 2,
                 input.affine_of(i) ? &pair_maps[i] : nullptr);
  }
  forward_on_threads<bfloat16>(pairs, words_in, words.data(), output, around_cache);
}
#endif

// The forward pass in float products, each input plane widened as it is turned.
inline void forward_in_float_products(const ConvGeometry& g,
                                      const ChannelParts<const bfloat16>& input,
                                      const bfloat16* weight, const ChannelParts<bfloat16>& output,
                                      bool around_cache) {
  const Buffer<float> w = widened(weight, conv_weight_size(g));
  forward_on_threads<float>(g, input, w.data(), output, around_cache);
}

}  // namespace detail

/// The forward pass for bfloat16 operands, with no float copy of them, in `products` (dot
/// products where the input channels come in pairs); sums in float, outputs rounded to bfloat16.
/// The input read and the output written in parts along the channels (a concatenation read as its
/// parts; output parts as takes_output_parts); input parts given as affine maps are mapped as
/// they are read (float products: each plane as it is widened; dot products: the channel pairs,
/// read as floats' bits, half by half as they are turned).
inline void conv_forward(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                         const bfloat16* weight, const ChannelParts<bfloat16>& output,
                         OutputStores stores = OutputStores::by_size,
                         Bf16Products products = bf16_products()) {
  if (!takes(g))
    throw std::invalid_argument("internal: the bfloat16 row kernels do not take this shape");
  const bool around_cache = writes_around_cache(g, stores, sizeof(bfloat16));
#if MESHTENSOR_TARGET_AVX512_BF16
  if (products == Bf16Products::dot && detail::in_pairs(input))
    return detail::forward_in_dot_products(g, input, weight, output, around_cache);
#endif
  (void)products;
  detail::forward_in_float_products(g, input, weight, output, around_cache);
}

inline void conv_forward(const ConvGeometry& g, const bfloat16* input, const bfloat16* weight,
                         bfloat16* output, OutputStores stores = OutputStores::by_size,
                         Bf16Products products = bf16_products()) {
  conv_forward(g, ChannelParts<const bfloat16>(input, g.c_in), weight,
               ChannelParts<bfloat16>(output, g.c_out), stores, products);
}

/// The input gradient for bfloat16 operands (the reversed convolution's forward pass above).
inline void conv_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                const bfloat16* weight, const ChannelParts<bfloat16>& grad_input,
                                OutputStores stores = OutputStores::by_size,
                                Bf16Products products = bf16_products()) {
  conv_forward(detail::reversed(g), ChannelParts<const bfloat16>(grad_output, g.c_out),
               detail::reversed_weight(g, weight).data(), grad_input, stores, products);
}

inline void conv_backward_input(const ConvGeometry& g, const bfloat16* grad_output,
                                const bfloat16* weight, bfloat16* grad_input,
                                OutputStores stores = OutputStores::by_size,
                                Bf16Products products = bf16_products()) {
  conv_backward_input(g, grad_output, weight, ChannelParts<bfloat16>(grad_input, g.c_in), stores,
                      products);
}

/// grad_weight += the gradient of the forward pass's output with respect to the weight, for
/// shapes fits_backward_weight(g) takes.
inline void conv_backward_weight(const ConvGeometry& g, const float* input,
                                 const float* grad_output, double* grad_weight) {
  // The first layer's output gradient read as it lies, input row by input row (faster than the
  // planar kernel there).
  if (fits_one_channel_weight(g))
    return conv_backward_weight_one_channel(g, input, grad_output, grad_weight);
  detail::planar_backward_weight<float>(g, ChannelParts<const float>(input, g.c_in), grad_output,
                                        grad_weight);
}

/// The same with the input held as parts along its channels (a concatenation read as its parts).
inline void conv_backward_weight(const ConvGeometry& g, const ChannelParts<const float>& input,
                                 const float* grad_output, double* grad_weight) {
  detail::planar_backward_weight<float>(g, input, grad_output, grad_weight);
}

namespace detail {
// The channel-lanes weight gradient's bands: as the planar kernel's, of rows of pair words.
inline std::int64_t channel_lanes_band(const ConvGeometry& g) {
  const PairGeometry p = pair_geometry(g);
  RowGeometry words;
  words.box = p.box;
  return band_rows(g, words, sizeof(std::uint32_t), sizeof(bfloat16),
                   g.out[2] * g.c_out * std::int64_t(sizeof(bfloat16)) +
                       p.pairs * g.c_out * std::int64_t(sizeof(std::uint32_t)));
}
}  // namespace detail

/// Whether the bfloat16 weight gradient in dot products runs `g` with the output channels in the
/// lanes (rows/form/channel_lanes_weight.hpp) rather than on the planar kernel: wherever it takes g
/// (as fast or faster there: bench/RESULTS.md, "Figures behind the kernels' choices").
inline bool runs_channel_lanes_weight(const ConvGeometry& g) {
  return enabled() && fits_channel_lanes_weight(g);
}

/// Whether the bfloat16 weight gradient below runs `g` in `products`: where the float one does;
/// in dot products with up to 16 channels on one side and wherever the output channels come in
/// sixteens (runs_channel_lanes_weight), where they beat oneDNN's bf16 kernels (bench/RESULTS.md);
/// kernels::conv times each shape against oneDNN's.
inline bool fits_backward_weight_bf16(const ConvGeometry& g,
                                      Bf16Products products = bf16_products()) {
  if (products == Bf16Products::dot)
    return fits_backward_weight(g, 16) || runs_channel_lanes_weight(g);
  return fits_backward_weight(g);
}

/// The same for bfloat16 operands, with no float copy of them: in dot products, two positions'
/// products a lane; in float products, the operands widened as their planes are turned. Exactly
/// the float kernel's products either way, summed in float (in dot products in another order).
/// The input held as parts along its channels (a concatenation read as its parts; parts given as
/// affine maps mapped as they are read: in float registers, rounded as norm_affine rounds).
inline void conv_backward_weight(const ConvGeometry& g, const ChannelParts<const bfloat16>& input,
                                 const bfloat16* grad_output, double* grad_weight,
                                 Bf16Products products = bf16_products()) {
  if (!fits_backward_weight_bf16(g, products))
    throw std::invalid_argument("internal: the bfloat16 row kernels do not take this shape");
#if MESHTENSOR_TARGET_AVX512_BF16
  if (products == Bf16Products::dot && runs_channel_lanes_weight(g))
    return channel_lanes_backward_weight(g, input, grad_output, grad_weight,
                                         detail::channel_lanes_band(g));
  if (products == Bf16Products::dot)
    return detail::planar_backward_weight<bfloat16>(g, input, grad_output, grad_weight);
#endif
  detail::planar_backward_weight<float>(g, input, grad_output, grad_weight);
}

inline void conv_backward_weight(const ConvGeometry& g, const bfloat16* input,
                                 const bfloat16* grad_output, double* grad_weight,
                                 Bf16Products products = bf16_products()) {
  conv_backward_weight(g, ChannelParts<const bfloat16>(input, g.c_in), grad_output, grad_weight,
                       products);
}

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET
