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

TEST(Json, IntegerGetterAcceptsIntegralDoublesAndRefusesTheRest) {
  auto o = json::parse_object(
      R"({"whole": 64.0, "neg": -2.0, "frac": 1.5, "huge": 1e300, "edge": 9223372036854775808.0,
          "low": -9223372036854775808.0})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*json::opt_int(*o, "whole").value(), 64);
  EXPECT_EQ(*json::opt_int(*o, "neg").value(), -2);
  EXPECT_EQ(*json::opt_int(*o, "low").value(), INT64_MIN);
  // Out of int64's range: refused (converting them would be undefined behaviour), not wrapped.
  EXPECT_FALSE(json::opt_int(*o, "frac").ok());
  EXPECT_FALSE(json::opt_int(*o, "huge").ok());
  EXPECT_FALSE(json::opt_int(*o, "edge").ok());
}

}  // namespace
}  // namespace plumb
