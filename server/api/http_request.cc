#include "server/api/http_request.h"

#include <algorithm>
#include <cctype>

namespace kvatlas::server {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

unsigned char Lower(char c) {
  return static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)));
}

}  // namespace

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                      [](char x, char y) { return Lower(x) < Lower(y); });
}

bool HttpRequest::HasHeader(std::string_view name) const { return headers.contains(name); }

std::string HttpRequest::Header(std::string_view name) const {
  const auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

size_t HttpRequest::HeaderCount(std::string_view name) const { return headers.count(name); }

bool HttpRequest::HasParam(std::string_view name) const { return params.contains(name); }

std::string HttpRequest::Param(std::string_view name) const {
  const auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

std::string PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int high = HexValue(text[i + 1]);
      const int low = HexValue(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

void SetTarget(std::string_view target, HttpRequest* request) {
  request->target = std::string(target);
  const size_t query = target.find('?');
  request->path = PercentDecode(target.substr(0, query), false);
  request->params.clear();
  if (query == std::string_view::npos) return;
  std::string_view rest = target.substr(query + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    request->params.emplace(
        PercentDecode(pair.substr(0, eq), true),
        eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), true));
  }
}

}  // namespace kvatlas::server
