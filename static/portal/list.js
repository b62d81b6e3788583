// The job list: the box in the ticks' column head ticks, or unticks, every job of the page the
// user may change, for the actions on the jobs ticked.
"use strict";

(function () {
  const all = document.getElementById("tick-all");
  const ticks = () => document.querySelectorAll("input.tick");
  all.addEventListener("change", () => {
    for (const tick of ticks()) tick.checked = all.checked;
  });
  document.addEventListener("change", (event) => {
    if (event.target.classList.contains("tick")) {
      all.checked = Array.from(ticks()).every((tick) => tick.checked);
    }
  });
})();
