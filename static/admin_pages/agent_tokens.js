// A new agent token's field selects the whole token when focused, ready to copy.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  for (const field of document.querySelectorAll("input.agent-token")) {
    field.addEventListener("focus", function () { field.select(); });
  }
});
