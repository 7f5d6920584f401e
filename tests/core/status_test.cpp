#include "core/status.h"

#include <gtest/gtest.h>

namespace plumb {
namespace {

Result<int> half(int x) {
  if (x % 2) return invalid_argument("odd");
  return x / 2;
}

Result<int> quarter(int x) {
  PLUMB_ASSIGN_OR_RETURN(int h, half(x));
  PLUMB_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = not_found("model.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.to_string(), "not_found: model.safetensors");
  EXPECT_EQ(s.with_context("loading").message(), "loading: model.safetensors");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*quarter(8), 2);
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd");
}

}  // namespace
}  // namespace plumb
