#pragma once
// Pictures of a run: the middle axial slice of a volume (CT in a soft-tissue window, ground truth
// and prediction outlined side by side) as PNG, and the loss and Dice curves as SVG.

#include <png.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <meshtensor/io/npy.hpp>

namespace unet3d {

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
  Image(int w, int h) : width(w), height(h), rgb(std::size_t(w) * h * 3, 0) {}
  void set(int x, int y, std::array<std::uint8_t, 3> c) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    std::copy(c.begin(), c.end(), rgb.begin() + (std::size_t(y) * width + x) * 3);
  }
};

/// Writes an RGB PNG through a temporary file and a rename.
inline void write_png(const std::string& path, const Image& image) {
  const std::string temporary = path + ".partial";
  std::FILE* f = std::fopen(temporary.c_str(), "wb");
  if (!f) throw meshtensor::IoError(path + ": cannot open for writing");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    std::remove(temporary.c_str());
    throw meshtensor::IoError(path + ": writing the PNG failed");
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y)
    png_write_row(png, const_cast<png_bytep>(image.rgb.data() + std::size_t(y) * image.width * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fclose(f) != 0 || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw meshtensor::IoError(path + ": writing the PNG failed");
  }
}

/// The colour of class `c` (1 and up) in pictures and curves: green, red, then more.
inline std::array<std::uint8_t, 3> class_colour(std::size_t c) {
  static const std::array<std::uint8_t, 3> colours[] = {
      {40, 220, 60},  {240, 40, 40},  {50, 110, 250}, {240, 200, 30},
      {220, 60, 220}, {40, 210, 220}, {250, 140, 30}, {150, 90, 40}};
  return colours[(c - 1) % (sizeof colours / sizeof colours[0])];
}

inline std::string svg_colour(std::size_t c) {
  const auto rgb = class_colour(c);
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return text;
}

/**
 * One axial slice, gray[x][y] (0 black to 1 white) with labels, drawn twice side by side at
 * `scale` pixels per voxel: left with the true outlines, right with the predicted ones, each
 * class (1 to classes - 1) in its colour.
 */
inline Image slice_picture(const xt::xarray<float>& gray, const xt::xarray<std::uint8_t>& truth,
                           const xt::xarray<std::uint8_t>& predicted, int classes, int scale = 4) {
  const int nx = int(gray.shape()[0]), ny = int(gray.shape()[1]);
  const int gap = 4;
  Image image(2 * nx * scale + gap, ny * scale);
  auto outline = [&](const xt::xarray<std::uint8_t>& labels, int x, int y, int cls) {
    auto in = [&](int a, int b) {
      return a >= 0 && b >= 0 && a < nx && b < ny && labels(a, b) == cls;
    };
    return in(x, y) && !(in(x - 1, y) && in(x + 1, y) && in(x, y - 1) && in(x, y + 1));
  };
  for (int panel = 0; panel < 2; ++panel) {
    const auto& labels = panel == 0 ? truth : predicted;
    for (int x = 0; x < nx; ++x)
      for (int y = 0; y < ny; ++y) {
        const float v = std::clamp(gray(x, y), 0.0f, 1.0f);
        std::array<std::uint8_t, 3> colour{std::uint8_t(v * 255), std::uint8_t(v * 255),
                                           std::uint8_t(v * 255)};
        for (int c = 1; c < classes; ++c)
          if (outline(labels, x, y, c)) colour = class_colour(std::size_t(c));
        for (int i = 0; i < scale; ++i)
          for (int j = 0; j < scale; ++j)
            image.set(panel * (nx * scale + gap) + x * scale + i, y * scale + j, colour);
      }
  }
  return image;
}

/// The loss per step and the validation Dice scores of the foreground classes (`names`, classes 1
/// and up) as an SVG line chart.
inline void write_curves(const std::string& path, const std::vector<double>& loss,
                         const std::vector<std::pair<int, std::vector<double>>>& dice,
                         const std::vector<std::string>& names) {
  const double w = 640, h = 360, left = 50, right = 20, top = 30, bottom = 40;
  const double max_loss =
      loss.empty() ? 1 : std::max(1e-9, *std::max_element(loss.begin(), loss.end()));
  const double steps = std::max<std::size_t>(loss.size(), 2) - 1;
  auto x_of = [&](double step) { return left + (w - left - right) * step / steps; };
  auto y_of = [&](double value, double max) {
    return h - bottom - (h - top - bottom) * value / max;
  };
  std::string svg =
      "<svg xmlns='http://www.w3.org/2000/svg' width='640' height='360' font-family='sans-serif' "
      "font-size='12'>\n"
      "<rect width='640' height='360' fill='white'/>\n";
  svg +=
      "<line x1='50' y1='320' x2='620' y2='320' stroke='black'/><line x1='50' y1='30' x2='50' "
      "y2='320' stroke='black'/>\n";
  std::string legend;
  for (std::size_t k = 0; k < names.size(); ++k)
    legend += (k ? ", " : "") + names[k] + " (" + svg_colour(k + 1) + ")";
  svg += "<text x='300' y='350'>step</text><text x='5' y='20'>loss (blue, 0 to " +
         std::to_string(max_loss).substr(0, 5) + ")  Dice " + legend + ", 0 to 1</text>\n";
  std::string points;
  for (std::size_t s = 0; s < loss.size(); ++s)
    points += std::to_string(x_of(double(s))) + "," + std::to_string(y_of(loss[s], max_loss)) + " ";
  svg += "<polyline fill='none' stroke='#3060d0' stroke-width='1.5' points='" + points + "'/>\n";
  for (std::size_t k = 0; k < names.size(); ++k) {
    std::string line;
    for (const auto& [step, d] : dice)
      line += std::to_string(x_of(step)) + "," + std::to_string(y_of(d[k], 1.0)) + " ";
    svg += "<polyline fill='none' stroke='" + svg_colour(k + 1) + "' stroke-width='2' points='" +
           line + "'/>\n";
  }
  svg += "<text x='625' y='324' text-anchor='end'>" + std::to_string(loss.size()) +
         "</text>\n</svg>\n";
  const std::string temporary = path + ".partial";
  std::ofstream out(temporary);
  out << svg;
  out.close();
  if (!out || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw meshtensor::IoError(path + ": writing the curves failed");
  }
}

}  // namespace unet3d
