#include <gtest/gtest.h>

#include "ckpt/s3_client.h"

namespace fmstack::ckpt {
namespace {

// AWS's published Signature Version 4 examples for S3 ("Signature
// Calculations for the Authorization Header: Transferring Payload in a Single
// Chunk"), credentials AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.
constexpr const char* kKey = "AKIAIOSFODNN7EXAMPLE";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(S3SignTest, GetObjectMatchesAwsExample) {
  SignedRequest r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"host", "examplebucket.s3.amazonaws.com"},
               {"range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmpty},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_sha256 = kEmpty;
  EXPECT_EQ(SignV4(r, "20130524T000000Z", "us-east-1", kKey, kSecret),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SignTest, ListObjectsMatchesAwsExample) {
  SignedRequest r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"max-keys", "2"}, {"prefix", "J"}};
  r.headers = {{"host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmpty},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_sha256 = kEmpty;
  EXPECT_NE(SignV4(r, "20130524T000000Z", "us-east-1", kKey, kSecret)
                .find("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
            std::string::npos);
}

TEST(S3SignTest, EncodingAndXml) {
  EXPECT_EQ(UriEncode("a b/c~d", true), "a%20b/c~d");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b%2Fc");
  EXPECT_EQ(Sha256Hex({}), kEmpty);
  EXPECT_EQ(XmlValues("<a><Key>x&amp;y</Key><Key>z</Key></a>", "Key"),
            (std::vector<std::string>{"x&y", "z"}));
}

}  // namespace
}  // namespace fmstack::ckpt
