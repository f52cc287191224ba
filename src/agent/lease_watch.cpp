#include "agent/lease_watch.h"

#include "common/units.h"

namespace gpupool::agent {

std::string LeaseWatch::Reason() const {
  return "lost contact with the server for " + FormatDurationMs(lease_ ? lease_->lease_ms : 0) +
         ": stopped so that the job can restart elsewhere (attempt lease)";
}

}  // namespace gpupool::agent
