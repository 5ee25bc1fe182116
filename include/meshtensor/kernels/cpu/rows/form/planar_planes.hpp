// What the row kernels (rows/conv.hpp) share: where a row's outputs read along the last dim, the
// input planes turned channel by channel a few at a time, and the output planes split among the
// processor's compute threads.
// Part of one instruction set's form of the kernels (rows/form/all.hpp): no include guard.

namespace meshtensor::kernels::rows::MESHTENSOR_TARGET::detail {

constexpr int L = Simd::lanes;
using V = Simd::V;

// Ordinary taps (a transposed dim with one tap and stride 1 reads as an ordinary one), stride 1
// along the rows.
inline bool ordinary(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.taps[d].transposed && (g.kernel[d] > 1 || g.taps[d].stride != 1)) return false;
  return g.taps[2].stride == 1;
}

// The U-Net's first layer: one input channel to 8, 3x3x3 taps, undilated along the rows (the
// shape the one-channel kernels take).
inline bool first_layer_shape(const ConvGeometry& g) {
  return g.c_in == 1 && g.c_out == 8 && g.kernel == std::array<std::int64_t, 3>{3, 3, 3} &&
         g.taps[2].dilation == 1;
}

// Vectors of outputs along the last dim, and the format of the box's rows they read: output o
// reads row position o + k*dilation + shift.
struct RowGeometry {
  std::int64_t vectors = 0, shift = 0, dilation = 1;
  RowFormat box, outputs;
};

// `positions`: a vector's positions (L for float; 2 L for bfloat16, two positions a lane).
inline RowGeometry row_geometry(const ConvGeometry& g, std::int64_t positions = L) {
  RowGeometry r;
  const Taps& t = g.taps[2];
  r.vectors = (g.out[2] + positions - 1) / positions;
  r.dilation = g.kernel[2] > 1 ? t.dilation : 1;
  r.box.before = std::max<std::int64_t>(0, -t.origin);
  r.shift = t.origin + r.box.before;
  const std::int64_t reach = r.vectors * positions + (g.kernel[2] - 1) * r.dilation + r.shift;
  r.box.width = round_up(std::max(reach, r.box.before + g.in[2]), positions);
  r.outputs = {0, r.vectors * positions};
  return r;
}

// Rows [lo, hi) along a plane's first dim.
struct PlaneRows {
  std::int64_t lo = 0, hi = 0;
};

// The box rows that output rows [lo, hi) (lo < hi) read along the planes' first dim through any
// tap, within the box: the ordinary taps' reads grow with the output row.
inline PlaneRows rows_read(const ConvGeometry& g, std::int64_t lo, std::int64_t hi) {
  const Taps& t = g.taps[1];
  std::int64_t first = g.in[1], last = -1;
  for (std::int64_t k = 0; k < g.kernel[1]; ++k)
    for (const std::int64_t o : {lo, hi - 1}) {
      const std::int64_t i = t.reads(o, k);
      if (i < 0) continue;
      first = std::min(first, i);
      last = std::max(last, i);
    }
  first = std::clamp<std::int64_t>(first, 0, g.in[1]);
  return {first, std::clamp<std::int64_t>(last + 1, first, g.in[1])};
}

// How PlanarPlanesOf turns a part's rows: planar rows [row][channel][format.width] (to_planar),
// the part's channels `first` rows in.
struct TurnPlanar {
  static std::int64_t part_offset(std::int64_t first, const RowFormat& format) {
    return first * format.width;
  }
  template <class From, class T>
  static void turn(const From* rows, std::int64_t n1, std::int64_t n2, std::int64_t c,
                   const RowFormat& format, T* to, std::int64_t row_stride,
                   const ChannelAffine* affine) {
    to_planar(rows, n1, n2, c, format, to, row_stride, affine);
  }
};

// The box's planes (batch p, first-dim index i) in planar form, a few at a time: the ones the
// current output plane reads, each turned once while consecutive output planes share it. Where
// whole planes would not stay in the second-level cache while the planes that share them pass,
// the kernels take the output planes in bands of rows, and only the rows a band reads are turned.
// Turn says into what (TurnPlanar; rows/form/pair_words.hpp's position pairs); a row holds c_in
// times format.width values either way.
template <class T, class Turn = TurnPlanar>
class PlanarPlanesOf {
 public:
  PlanarPlanesOf(const ConvGeometry& g, const RowFormat& format)
      : g_(g),
        format_(format),
        plane_size_(g.in[1] * g.c_in * format.width),
        slots_(static_cast<std::size_t>(g.kernel[0]), -1),
        data_(static_cast<std::size_t>(elements(g, format))) {}

  /// The elements it holds for `g` in `format`: a plane for each tap along the first dim.
  static std::int64_t elements(const ConvGeometry& g, const RowFormat& format) {
    return g.in[1] * g.c_in * format.width * g.kernel[0];
  }

  /// Per tap k0, the plane output plane (p, o0) reads through it, or null where that is padding.
  /// A box of another type than T is converted as it is turned (to_planar).
  template <class From>
  std::vector<const T*> read_by(const From* box, std::int64_t p, std::int64_t o0) {
    return read_by(ChannelParts<const From>(box, g_.c_in), p, o0, {0, g_.in[1]});
  }
  /// The same for a box held as parts along its channels, each turned into its channels' rows;
  /// of each plane only `rows` (a band: PlaneRows), at their places in the plane.
  template <class From>
  std::vector<const T*> read_by(const ChannelParts<const From>& box, std::int64_t p,
                                std::int64_t o0, PlaneRows rows) {
    if (rows.lo != rows_.lo || rows.hi != rows_.hi) {  // a new band: no slot holds its rows
      std::fill(slots_.begin(), slots_.end(), -1);
      rows_ = rows;
    }
    std::vector<std::int64_t> wanted(slots_.size(), -1);
    for (std::int64_t k = 0; k < g_.kernel[0]; ++k) {
      const std::int64_t i = g_.taps[0].reads(o0, k);
      if (i >= 0 && i < g_.in[0]) wanted[k] = p * g_.in[0] + i;
    }
    std::vector<const T*> planes(slots_.size(), nullptr);
    for (std::size_t k = 0; k < wanted.size(); ++k)
      if (wanted[k] >= 0) planes[k] = slot_of(box, wanted[k], wanted);
    return planes;
  }

 private:
  template <class From>
  const T* slot_of(const ChannelParts<const From>& box, std::int64_t key,
                   const std::vector<std::int64_t>& wanted) {
    for (std::size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s] == key) return data_.data() + s * plane_size_;
    // A slot no wanted plane is in: one output plane reads at most kernel[0] planes.
    std::size_t s = 0;
    while (slots_[s] >= 0 && std::find(wanted.begin(), wanted.end(), slots_[s]) != wanted.end())
      ++s;
    slots_[s] = key;
    T* plane = data_.data() + s * plane_size_;
    const std::int64_t row_stride = g_.c_in * format_.width;
    for (std::size_t i = 0, first = 0; i < box.size(); first += box.channels[i++]) {
      const From* rows = box.data[i] + (key * g_.in[1] + rows_.lo) * g_.in[2] * box.channels[i];
      T* to = plane + rows_.lo * row_stride + Turn::part_offset(std::int64_t(first), format_);
      // A part given as its affine map is mapped here, as it is turned.
      Turn::turn(rows, rows_.hi - rows_.lo, g_.in[2], box.channels[i], format_, to, row_stride,
                 box.affine_of(i));
    }
    return plane;
  }

  ConvGeometry g_;
  RowFormat format_;
  std::int64_t plane_size_;
  std::vector<std::int64_t> slots_;  // the key (p * in0 + i) held by each slot, or -1
  PlaneRows rows_{0, 0};             // the rows of their planes the slots hold
  Buffer<T> data_;
};
using PlanarPlanes = PlanarPlanesOf<float>;

// Runs part(state, a, b) for parts [a, b) of n planes on up to the processor's compute threads,
// each part with its own state, made on the calling thread (whose processor's pool it draws on);
// returns the states.
// How many parts on_plane_parts cuts n planes into: one per compute thread, at most n.
inline int plane_parts(std::int64_t n) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(compute_threads(), n)));
}

template <class MakeState, class Part>
auto on_plane_parts(std::int64_t n, MakeState&& make_state, Part&& part) {
  const int parts = plane_parts(n);
  std::vector<decltype(make_state())> states;
  states.reserve(parts);
  for (int p = 0; p < parts; ++p) states.push_back(make_state());
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1) if (parts > 1)
#endif
  for (int p = 0; p < parts; ++p) part(states[p], n * p / parts, n * (p + 1) / parts);
  return states;
}

}  // namespace meshtensor::kernels::rows::MESHTENSOR_TARGET::detail
