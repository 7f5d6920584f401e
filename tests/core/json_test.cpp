#include "core/json.h"

#include <gtest/gtest.h>

namespace plumb {
namespace {

TEST(Json, ParseErrorsAreValues) {
  EXPECT_FALSE(json::parse("{").ok());
  EXPECT_FALSE(json::parse("").ok());
  EXPECT_FALSE(json::parse_object("[1]").ok());
  std::string deep(1000, '[');
  EXPECT_FALSE(json::parse(deep).ok());
  EXPECT_TRUE(json::parse_object(R"({"a":1})").ok());
}

TEST(Json, CanonicalSortsKeysWithoutSpaces) {
  auto v = json::parse(R"({"b": [1, {"z": true, "a": null}], "a": "x"})");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(json::canonical(*v), R"({"a":"x","b":[1,{"a":null,"z":true}]})");
}

TEST(Json, TypedGetters) {
  auto o = json::parse_object(R"({"n": 3, "f": 0.5, "s": "hi", "b": true, "bad": "3"})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*json::opt_int(*o, "n").value(), 3);
  EXPECT_DOUBLE_EQ(*json::opt_double(*o, "f").value(), 0.5);
  EXPECT_DOUBLE_EQ(*json::opt_double(*o, "n").value(), 3.0);
  EXPECT_EQ(*json::opt_string(*o, "s").value(), "hi");
  EXPECT_TRUE(*json::opt_bool(*o, "b").value());
  EXPECT_FALSE(json::opt_int(*o, "missing").value().has_value());
  auto bad = json::opt_int(*o, "bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'bad'"), std::string::npos);
}

}  // namespace
}  // namespace plumb
