#include "data/html_text.h"

#include <gtest/gtest.h>

#include "data/shard_stages.h"

namespace fmstack::data {
namespace {

TEST(HtmlText, MainTextWithoutChrome) {
  const HtmlText t = ExtractHtmlText(R"(<!DOCTYPE html><html lang="ja-JP"><head>
<title>題名</title><style>p{color:red}</style><script>var x = "no";</script></head>
<body><nav><a href="/">Home</a> | <a href="/x">Menu</a></nav>
<header>Site banner</header>
<div role="navigation">Breadcrumbs</div>
<main><h1>Heading</h1><p>First   paragraph
 continues.</p><p>Second <b>bold</b> one.</p>
<ul><li>item one</li><li>item two</li></ul>
<table><tr><td>a</td><td>b</td></tr></table>
<pre>  code
   indented</pre></main>
<footer>Copyright</footer><noscript>enable js</noscript></body></html>)");
  EXPECT_EQ(t.declared_lang, "ja");
  EXPECT_EQ(t.title, "題名");
  EXPECT_EQ(t.text,
            "Heading\nFirst paragraph continues.\nSecond bold one.\nitem one\nitem two\na\tb\n"
            "code\nindented\n");
}

TEST(HtmlText, MalformedAndDeepPagesParse) {
  const HtmlText t = ExtractHtmlText("<p>unclosed <b>bold <i>both</p><div>after");
  EXPECT_EQ(t.text, "unclosed bold both\nafter\n");
  // Nesting: 1,500 levels parse; 100,000 (gumbo would take minutes) are
  // refused by the scan before parsing.
  std::string deep;
  for (int i = 0; i < 1500; ++i) deep += "<span>";
  deep += "x";
  EXPECT_EQ(TagDepth(deep), 1500u);
  EXPECT_EQ(ExtractHtmlText(deep).text, "x\n");
  for (int i = 0; i < 98500; ++i) deep += "<div>";
  EXPECT_TRUE(ExtractHtmlText(deep).too_deep);
  // Tags a page may leave open, void elements, self-closed ones in SVG, stray
  // end tags and what scripts and comments hold do not nest.
  std::string flat;
  for (int i = 0; i < 5000; ++i)
    flat += "<p>para<li>item<br><img src=x/><svg><path d=x/></svg><b>b</b></z>";
  flat += "<script>for (i=0; i<n; i++) if (a<b) x = '<div>';</script><!-- <div><div> -->";
  EXPECT_EQ(TagDepth(flat), 1u);
  EXPECT_FALSE(ExtractHtmlText(flat).too_deep);
  // What HTML does not close does count: "<div/>" is an open div, "</z>" closes nothing.
  std::string hostile;
  for (int i = 0; i < 3000; ++i) hostile += i % 2 ? "<div/>" : "<span></z>";
  EXPECT_EQ(TagDepth(hostile), 3000u);
  EXPECT_TRUE(ExtractHtmlText(hostile).too_deep);
  EXPECT_EQ(TagDepth(std::string(100000, '<') + "a"), 1u);  // no '>': scanned once, not per '<'
  EXPECT_EQ(ExtractHtmlText("").text, "");
}

TEST(HtmlText, LanguageTags) {
  EXPECT_EQ(PrimaryLanguage("EN_us"), "en");
  EXPECT_EQ(PrimaryLanguage("zh-Hant-TW"), "zh");
  EXPECT_EQ(PrimaryLanguage("1x"), "");
  EXPECT_EQ(DeclaredLanguage("<!doctype html>\n<HTML LANG='de'><body>"), "de");
  EXPECT_EQ(DeclaredLanguage("<html xmlns=\"x\" xml:lang=\"fr-CA\">"), "fr");
  EXPECT_EQ(DeclaredLanguage("<htmlx lang=en><html>"), "");
  EXPECT_EQ(DeclaredLanguage("<p>no html tag</p>"), "");
  EXPECT_EQ(HostOf("https://User@Sub.Example.org:8443/a?b"), "sub.example.org");
  EXPECT_EQ(HostOf("not a url"), "");
}

}  // namespace
}  // namespace fmstack::data
