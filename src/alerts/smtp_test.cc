#include "alerts/smtp.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "testing/smtp_sink.h"
#include "testing/testing.h"

namespace tessera::alerts {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::SmtpSink;

// A loopback port nothing listens on.
int ClosedPort() { return tessera::testing::FreeTcpPort(); }

SmtpMessage Message() {
  return {"alerts@tessera.example",
          {"ops@example.com"},
          "From: alerts@tessera.example\r\nTo: ops@example.com\r\nSubject: hello\r\n\r\nbody\r\n"};
}

TEST(SmtpDataForWire, CrlfLineEndsDotStuffingAndTerminator) {
  EXPECT_EQ(SmtpDataForWire("a\nb\r\n.c\r..d\n"), "a\r\nb\r\n..c\r\n...d\r\n.\r\n");
  EXPECT_EQ(SmtpDataForWire("no newline at end"), "no newline at end\r\n.\r\n");
  EXPECT_EQ(SmtpDataForWire("."), "..\r\n.\r\n");
  EXPECT_EQ(SmtpDataForWire(""), ".\r\n");
}

TEST(SmtpClient, DeliversToSink) {
  SmtpSink sink;
  ASSERT_NE(sink.port(), 0);
  SmtpClient client;
  SmtpMessage m = Message();
  m.to.push_back("oncall@example.com");
  const Status s = client.Send("127.0.0.1", sink.port(), m, milliseconds(5000));
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(sink.WaitForMessages(1, milliseconds(5000)));
  const SmtpSink::Message got = sink.messages().at(0);
  EXPECT_EQ(got.from, "alerts@tessera.example");
  EXPECT_THAT(got.recipients, ElementsAre("ops@example.com", "oncall@example.com"));
  EXPECT_EQ(got.Header("subject"), "hello");
  EXPECT_EQ(got.Body(), "body\r\n");
}

TEST(SmtpClient, DotStuffedLinesArriveIntact) {
  SmtpSink sink;
  SmtpClient client;
  SmtpMessage m = Message();
  m.data = "Subject: dots\n\n.hidden\n.\n..two\nend";
  ASSERT_TRUE(client.Send("127.0.0.1", sink.port(), m, milliseconds(5000)).ok());
  ASSERT_TRUE(sink.WaitForMessages(1, milliseconds(5000)));
  EXPECT_EQ(sink.messages().at(0).Body(), ".hidden\r\n.\r\n..two\r\nend\r\n");
}

TEST(SmtpClient, RefusedRecipientNamesTheStepAndReply) {
  SmtpSink sink;
  sink.RefuseAt(SmtpSink::Step::kRcptTo, "550 5.1.1 no such user");
  SmtpClient client;
  const Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);  // 5xx: not worth retrying.
  EXPECT_EQ(s.message(), "SMTP RCPT TO:<ops@example.com>: server replied 550 5.1.1 no such user");
  EXPECT_TRUE(sink.messages().empty());
}

TEST(SmtpClient, TemporaryRefusalIsRetryable) {
  SmtpSink sink;
  sink.RefuseAt(SmtpSink::Step::kMailFrom, "451 4.3.0 try again later");
  SmtpClient client;
  const Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("SMTP MAIL FROM: server replied 451 4.3.0 try again later"));
}

TEST(SmtpClient, RefusedGreetingAndHelo) {
  SmtpSink sink;
  sink.RefuseAt(SmtpSink::Step::kGreeting, "554 5.3.2 go away");
  SmtpClient client;
  Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.message(), "SMTP greeting: server replied 554 5.3.2 go away");

  // EHLO refused: the client falls back to HELO, which is refused too.
  sink.RefuseAt(SmtpSink::Step::kHelo, "550 5.7.0 not you");
  s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.message(), "SMTP HELO: server replied 550 5.7.0 not you");
}

TEST(SmtpClient, RefusedDataAndEndOfData) {
  SmtpSink sink;
  sink.RefuseAt(SmtpSink::Step::kData, "554 5.6.0 no data today");
  SmtpClient client;
  Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.message(), "SMTP DATA: server replied 554 5.6.0 no data today");
  sink.RefuseAt(SmtpSink::Step::kEndOfData, "552 5.3.4 too big");
  s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(5000));
  EXPECT_EQ(s.message(), "SMTP end of DATA: server replied 552 5.3.4 too big");
  EXPECT_TRUE(sink.messages().empty());
}

TEST(SmtpClient, ConnectionRefused) {
  SmtpClient client;
  const int port = ClosedPort();
  const Status s = client.Send("127.0.0.1", port, Message(), milliseconds(2000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("SMTP connect to 127.0.0.1:" + std::to_string(port)));
}

TEST(SmtpClient, SlowServerTimesOut) {
  SmtpSink sink;
  sink.SetReplyDelay(milliseconds(2000));
  SmtpClient client;
  const auto start = std::chrono::steady_clock::now();
  const Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(150));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "SMTP greeting: timed out");
  EXPECT_LT(took, milliseconds(1500));
}

TEST(SmtpClient, CancelStopsASendInProgress) {
  SmtpSink sink;
  sink.SetReplyDelay(milliseconds(5000));
  SmtpClient client;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(50));
    client.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  const Status s = client.Send("127.0.0.1", sink.port(), Message(), milliseconds(10000));
  const auto took = std::chrono::steady_clock::now() - start;
  canceller.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("cancelled"));
  EXPECT_LT(took, milliseconds(2000));
}

TEST(SmtpClient, AddressesCannotInjectCommands) {
  SmtpSink sink;
  SmtpClient client;
  SmtpMessage m = Message();
  m.to = {"ops@example.com>\r\nRCPT TO:<evil@example.com"};
  Status s = client.Send("127.0.0.1", sink.port(), m, milliseconds(2000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is not a usable address"));
  m = Message();
  m.from = "a@b\nRSET";
  s = client.Send("127.0.0.1", sink.port(), m, milliseconds(2000));
  EXPECT_THAT(s.message(), HasSubstr("SMTP MAIL FROM"));
  EXPECT_EQ(sink.connections(), 0);
}

}  // namespace
}  // namespace tessera::alerts
