#pragma once
// The console format of a run's log: "[HH:MM:SS] <text>" for info lines, with "warning: ",
// "error: " or "debug: " before the text of the other levels, so that an operator (or a grep)
// tells a warning from progress without logging.level.
namespace trainer {

void use_run_log_format();

}  // namespace trainer
