#include "common/log.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(RedactSecretsTest, TokensBearerPasswordsAndKeysAreRedacted) {
  EXPECT_EQ(RedactSecrets("created gpt_0123456789abcdef0123 for alice"),
            "created gpt_[redacted] for alice");
  EXPECT_EQ(RedactSecrets("join gpj_00ff.abcdef0123 ok"), "join gpj_[redacted] ok");
  EXPECT_EQ(RedactSecrets("node token gpn_9f, admin gpa_aa"),
            "node token gpn_[redacted], admin gpa_[redacted]");
  EXPECT_EQ(RedactSecrets("Authorization: Bearer s3cr3t-value\n"),
            "Authorization: Bearer [redacted]\n");
  EXPECT_EQ(RedactSecrets(R"({"user":"dana","password": "p\"w d"})"),
            R"({"user":"dana","password": "[redacted]"})");
  EXPECT_EQ(RedactSecrets("key -----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE "
                          "KEY----- done"),
            "key [redacted private key] done");
  // Ordinary text, ids and near misses stay.
  EXPECT_EQ(RedactSecrets("token 1be409b57dd9 of gpt_ (no secret), gpx_ab"),
            "token 1be409b57dd9 of gpt_ (no secret), gpx_ab");
  EXPECT_EQ(RedactSecrets(R"("password" at the end)"), R"("password": "[redacted]")");
}

}  // namespace
}  // namespace gpupool
