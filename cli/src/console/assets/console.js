// The airlock console's only script: keeps the pending list current without a reload. The rows come
// from the console itself, rendered and escaped on the server.
(function () {
  "use strict";
  var rows = document.getElementById("pending-rows");
  if (!rows) {
    return;
  }
  var refresh = function () {
    fetch("/pending/rows", { credentials: "same-origin", cache: "no-store", redirect: "error" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("status " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        if (rows.innerHTML !== html) {
          rows.innerHTML = html;
        }
        document.body.classList.remove("stale");
      })
      .catch(function () {
        // Signed out or the console stopped: say the list may be old.
        document.body.classList.add("stale");
      });
  };
  setInterval(refresh, 2000);
})();
