// Two inputs that exclude each other, as whole GPUs and a share of one do: when one is given
// a number above 0, the other (named by its data-excludes) is set to 0, so the form asks for
// one of them, as the API takes it. Without this script both are sent as typed, and the
// server names the one at fault.
(function () {
  for (const input of document.querySelectorAll("input[data-excludes]")) {
    const other = input.form.elements.namedItem(input.dataset.excludes);
    input.addEventListener("input", function () {
      if (other && Number(input.value) > 0) other.value = "0";
    });
  }
})();
