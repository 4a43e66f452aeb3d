#include "util/text_table.h"

#include <algorithm>
#include <cassert>

namespace fmstack {
namespace {

// Display width, counting UTF-8 continuation bytes as zero.
size_t Width(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string Pad(const std::string& s, size_t width, TextTable::Align align) {
  const std::string fill(width - std::min(width, Width(s)), ' ');
  return align == TextTable::Align::kLeft ? s + fill : fill + s;
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  if (align_.empty()) {
    align_.assign(header_.size(), Align::kRight);
    align_[0] = Align::kLeft;
  }
  assert(align_.size() == header_.size());
}

void TextTable::AddRow(std::vector<std::string> cells) {
  assert(cells.size() == header_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::RenderText() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = Width(header_[c]);
    for (const auto& row : rows_) width[c] = std::max(width[c], Width(row[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c)
      l += (c ? "  " : "") + Pad(cells[c], width[c], align_[c]);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header_);
  std::string rule;
  for (size_t c = 0; c < width.size(); ++c) rule += (c ? "  " : "") + std::string(width[c], '-');
  out += rule + "\n";
  for (const auto& row : rows_) line(row);
  return out;
}

std::string TextTable::RenderMarkdown() const {
  std::string out = "|";
  for (const auto& h : header_) out += " " + h + " |";
  out += "\n|";
  for (const Align a : align_) out += a == Align::kLeft ? "---|" : "--:|";
  out += "\n";
  for (const auto& row : rows_) {
    out += "|";
    for (const auto& cell : row) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

}  // namespace fmstack
