// The submit form: the parts for a family other than the one chosen (a training gang's
// workers, a batch's shards, a share of a GPU, which training does not take) are hidden and
// disabled, so they are not sent and the API's defaults hold. A part the server marked with
// an error stays in sight, to be mended. Without this script every part is shown and sent.
(function () {
  const form = document.getElementById("submit-form");
  const family = form.querySelector('select[name="family"]');
  const parts = form.querySelectorAll("fieldset[data-families]");

  function show() {
    for (const part of parts) {
      const wanted = part.dataset.families.split(" ").includes(family.value);
      const invalid = part.querySelector('[aria-invalid="true"]') !== null;
      part.hidden = !wanted && !invalid;
      part.disabled = !wanted && !invalid;
    }
  }

  family.addEventListener("change", show);
  show();
})();
