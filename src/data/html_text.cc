#include "data/html_text.h"

#include <gumbo.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <utility>
#include <vector>

#include "data/utf8.h"

namespace fmstack::data {
namespace {

bool Dropped(const GumboElement& e) {
  switch (e.tag) {
    case GUMBO_TAG_SCRIPT:
    case GUMBO_TAG_STYLE:
    case GUMBO_TAG_NOSCRIPT:
    case GUMBO_TAG_TEMPLATE:
    case GUMBO_TAG_SVG:
    case GUMBO_TAG_MATH:
    case GUMBO_TAG_IFRAME:
    case GUMBO_TAG_OBJECT:
    case GUMBO_TAG_SELECT:
    case GUMBO_TAG_BUTTON:
    case GUMBO_TAG_TEXTAREA:
    case GUMBO_TAG_NAV:
    case GUMBO_TAG_HEADER:
    case GUMBO_TAG_FOOTER:
    case GUMBO_TAG_ASIDE:
    case GUMBO_TAG_HEAD:
      return true;
    default:
      break;
  }
  const GumboAttribute* role = gumbo_get_attribute(&e.attributes, "role");
  if (role == nullptr) return false;
  const std::string_view r = role->value;
  return r == "navigation" || r == "banner" || r == "contentinfo" || r == "search";
}

bool Block(GumboTag tag) {
  switch (tag) {
    case GUMBO_TAG_P:
    case GUMBO_TAG_DIV:
    case GUMBO_TAG_LI:
    case GUMBO_TAG_UL:
    case GUMBO_TAG_OL:
    case GUMBO_TAG_DL:
    case GUMBO_TAG_DT:
    case GUMBO_TAG_DD:
    case GUMBO_TAG_H1:
    case GUMBO_TAG_H2:
    case GUMBO_TAG_H3:
    case GUMBO_TAG_H4:
    case GUMBO_TAG_H5:
    case GUMBO_TAG_H6:
    case GUMBO_TAG_PRE:
    case GUMBO_TAG_TABLE:
    case GUMBO_TAG_TR:
    case GUMBO_TAG_BLOCKQUOTE:
    case GUMBO_TAG_SECTION:
    case GUMBO_TAG_ARTICLE:
    case GUMBO_TAG_MAIN:
    case GUMBO_TAG_BR:
    case GUMBO_TAG_HR:
    case GUMBO_TAG_FIGCAPTION:
    case GUMBO_TAG_CAPTION:
    case GUMBO_TAG_ADDRESS:
    case GUMBO_TAG_BODY:
      return true;
    default:
      return false;
  }
}

// Appends text with runs of white space as one space (inside <pre>, as is).
void AppendText(std::string& out, std::string_view text, bool pre) {
  if (pre) {
    out.append(text);
    return;
  }
  for (const char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f';
    if (!space) {
      out.push_back(c);
    } else if (!out.empty() && out.back() != ' ' && out.back() != '\n' && out.back() != '\t') {
      out.push_back(' ');
    }
  }
}

void EndLine(std::string& out) {
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (!out.empty() && out.back() != '\n') out.push_back('\n');
}

std::string Attribute(const GumboElement& e, const char* name) {
  const GumboAttribute* a = gumbo_get_attribute(&e.attributes, name);
  return a ? a->value : "";
}

struct OutputDeleter {
  void operator()(GumboOutput* o) const { gumbo_destroy_output(&kGumboDefaultOptions, o); }
};

bool NotNesting(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "p",      "li",    "dt",    "dd",    "tr",    "td",    "th",       "option", "optgroup",
      "rb",     "rt",    "rp",    "thead", "tbody", "tfoot", "colgroup", "area",   "base",
      "br",     "col",   "embed", "hr",    "img",   "input", "link",     "meta",   "param",
      "source", "track", "wbr",   "html",  "head",  "body"};
  for (const std::string_view n : kNames)
    if (n == name) return true;
  return false;
}

}  // namespace

size_t TagDepth(std::string_view html) {
  std::string lower(html);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string_view h = lower;
  std::vector<std::string> open;  // the nesting elements open, innermost last
  size_t deepest = 0, gt = 0;     // gt: the next '>' at or after the scan (npos: none left)
  int foreign = 0;                // inside svg or math, where "/>" closes an element
  std::string name;
  for (size_t i = h.find('<'); i != std::string_view::npos && i + 1 < h.size();
       i = h.find('<', i + 1)) {
    if (h.compare(i, 4, "<!--") == 0) {  // a comment holds no tags
      const size_t end = h.find("-->", i + 4);
      if (end == std::string_view::npos) break;
      i = end + 2;
      continue;
    }
    const bool closing = h[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    name.clear();
    while (j < h.size() && std::isalnum(static_cast<unsigned char>(h[j])) && name.size() < 16)
      name.push_back(h[j++]);
    if (name.empty()) continue;
    if (gt != std::string_view::npos && gt < j) gt = h.find('>', j);  // each byte searched once
    const size_t end = gt == std::string_view::npos ? h.size() : gt;
    if (closing) {
      // Only an end tag of an open element closes anything (gumbo ignores the rest).
      const auto it = std::find(open.rbegin(), open.rend(), name);
      if (it != open.rend()) {
        for (auto k = open.rbegin(); k != it + 1; ++k) foreign -= *k == "svg" || *k == "math";
        open.erase(std::prev(it.base()), open.end());
      }
      continue;
    }
    // Raw text: nothing until its end tag is markup.
    if (name == "script" || name == "style" || name == "textarea" || name == "title" ||
        name == "xmp" || name == "noembed" || name == "noframes") {
      const size_t close = h.find("</" + name, end);
      if (close == std::string_view::npos) break;
      i = close;
      continue;
    }
    if (NotNesting(name)) continue;
    if (foreign > 0 && end > 0 && end < h.size() && h[end - 1] == '/') continue;  // <path/>
    open.push_back(name);
    foreign += name == "svg" || name == "math";
    deepest = std::max(deepest, open.size());
  }
  return deepest;
}

std::string PrimaryLanguage(std::string_view tag) {
  std::string out;
  for (const char c : tag) {
    if (c == '-' || c == '_') break;
    if (!std::isalpha(static_cast<unsigned char>(c))) return "";
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out.size() <= 8 ? out : "";
}

HtmlText ExtractHtmlText(std::string_view html) {
  if (TagDepth(html) > kMaxHtmlDepth) {
    HtmlText refused;
    refused.too_deep = true;
    return refused;
  }
  const std::unique_ptr<GumboOutput, OutputDeleter> parsed(
      gumbo_parse_with_options(&kGumboDefaultOptions, html.data(), html.size()));
  HtmlText r;
  if (parsed->root->type == GUMBO_NODE_ELEMENT) {
    const GumboElement& root = parsed->root->v.element;
    std::string lang = Attribute(root, "lang");
    if (lang.empty()) lang = Attribute(root, "xml:lang");
    r.declared_lang = PrimaryLanguage(lang);
  }
  // Depth-first, children in order: (node, leaving) pairs on a stack.
  struct Visit {
    const GumboNode* node;
    bool leaving;
  };
  std::vector<Visit> stack{{parsed->root, false}};
  int pre = 0;
  while (!stack.empty()) {
    const Visit v = stack.back();
    stack.pop_back();
    const GumboNode* n = v.node;
    if (n->type == GUMBO_NODE_TEXT || n->type == GUMBO_NODE_CDATA ||
        n->type == GUMBO_NODE_WHITESPACE) {
      AppendText(r.text, n->v.text.text, pre > 0);
      continue;
    }
    if (n->type != GUMBO_NODE_ELEMENT && n->type != GUMBO_NODE_DOCUMENT) continue;
    if (n->type == GUMBO_NODE_ELEMENT) {
      const GumboElement& e = n->v.element;
      if (v.leaving) {
        if (e.tag == GUMBO_TAG_PRE) --pre;
        if (Block(e.tag)) EndLine(r.text);
        if (e.tag == GUMBO_TAG_TD || e.tag == GUMBO_TAG_TH) r.text.push_back('\t');
        continue;
      }
      if (e.tag == GUMBO_TAG_HEAD) {
        for (unsigned i = 0; i < e.children.length && r.title.empty(); ++i) {
          const auto* c = static_cast<const GumboNode*>(e.children.data[i]);
          if (c->type != GUMBO_NODE_ELEMENT || c->v.element.tag != GUMBO_TAG_TITLE ||
              c->v.element.children.length == 0)
            continue;
          const auto* t = static_cast<const GumboNode*>(c->v.element.children.data[0]);
          if (t->type == GUMBO_NODE_TEXT) r.title = t->v.text.text;
        }
      }
      if (Dropped(e)) continue;
      if (e.tag == GUMBO_TAG_PRE) ++pre;
      if (Block(e.tag)) EndLine(r.text);
      stack.push_back({n, true});
    }
    const GumboVector& children =
        n->type == GUMBO_NODE_ELEMENT ? n->v.element.children : n->v.document.children;
    for (unsigned i = children.length; i-- > 0;)
      stack.push_back({static_cast<const GumboNode*>(children.data[i]), false});
  }
  // Lines trimmed, blank ones dropped.
  std::string clean;
  ForEachLine(r.text, [&](std::string_view line) {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    if (!line.empty()) {
      clean.append(line);
      clean.push_back('\n');
    }
  });
  r.text = std::move(clean);
  return r;
}

}  // namespace fmstack::data
