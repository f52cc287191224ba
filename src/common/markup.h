// Text in markup: HTML and XML (SVG) pages the tools write themselves.
#pragma once

#include <string>
#include <string_view>

namespace gpupool {

// `text` as character data or a quoted attribute value: & < > " ' escaped,
// so that no text from a user, a job or the ledger can become markup.
std::string XmlEscape(std::string_view text);

}  // namespace gpupool
