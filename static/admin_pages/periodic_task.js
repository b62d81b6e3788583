// The periodic task form: under the crontab chosen, what it means in words.
(function () {
  "use strict";
  const help = document.currentScript.dataset.crontabHelp;
  document.addEventListener("DOMContentLoaded", function () {
    const $ = django.jQuery;
    const readable = JSON.parse($("#readable-crontabs").text());
    $(".field-crontab_translation").hide();
    $(".field-crontab").change(function () {
      const said = $(".field-crontab .help").text(help);
      said.append("<br>", document.createTextNode("Translation: " + readable[$("#id_crontab").val()]));
    });
  });
})();
