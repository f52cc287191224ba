#include "common/markup.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(MarkupTest, NoTextBecomesMarkup) {
  EXPECT_EQ(XmlEscape("<script>alert('x')</script> & \"co\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;co&quot;");
  EXPECT_EQ(XmlEscape("plain ünïcode"), "plain ünïcode");
  EXPECT_EQ(XmlEscape(""), "");
}

}  // namespace
}  // namespace gpupool
