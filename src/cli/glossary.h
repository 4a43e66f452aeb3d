// The terms fmstack prints, each defined once. docs/glossary.md holds the
// same table (a test keeps the two equal); `fmstack sim --explain` and
// `fmstack catalog list terms` print it.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace fmstack::cli {

struct Term {
  std::string_view name;
  std::string_view meaning;
};

std::span<const Term> Glossary();

// The glossary's rows whose names are in `names`, in the glossary's order,
// as "name: meaning" lines wrapped to `width` columns.
std::string ExplainTerms(std::span<const std::string_view> names, size_t width = 100);

}  // namespace fmstack::cli
