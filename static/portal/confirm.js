// A button with data-confirm asks before its form is sent: the page's scripts are files of the
// app alone (its Content-Security-Policy runs no script written in the page).
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) {
    event.preventDefault();
  }
});
