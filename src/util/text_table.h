// A small table renderer for terminal (aligned columns) and Markdown output.
#pragma once

#include <string>
#include <vector>

namespace fmstack {

class TextTable {
 public:
  enum class Align { kLeft, kRight };

  explicit TextTable(std::vector<std::string> header, std::vector<Align> align = {});

  void AddRow(std::vector<std::string> cells);  // REQUIRES: cells.size() == header size

  std::string RenderText() const;      // columns padded, a rule under the header
  std::string RenderMarkdown() const;  // GitHub-flavoured pipe table

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fmstack
