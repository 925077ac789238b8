/* The checkout page's live status, countdown and copy buttons.

   The server renders every text in the page's language; this script only
   shows and hides what it rendered and writes numbers in, from the status it
   polls (GET <data-status-url>, JSON). The rules match the server's:
     [data-show="s1 s2"]  visible when the state is one of these,
     [data-if="flag"]     visible when the status's flag is true,
     [data-field="name"]  text = status[name]  (data-format="usd" for money),
     [data-href], [data-src] and progress [data-value]/[data-max] likewise.
   Without JavaScript the page is complete, just not live. */
(function () {
  "use strict";

  var root = document.querySelector("[data-checkout]");
  if (!root) {
    return;
  }

  var statusUrl = root.getAttribute("data-status-url");
  var pollMs = Math.max(1, parseInt(root.getAttribute("data-poll-seconds"), 10) || 5) * 1000;
  var maxBackoffMs = 60000;
  var state = root.getAttribute("data-state");
  var requestId = root.getAttribute("data-request");
  var final = root.getAttribute("data-final") === "1";
  var deadline = Date.now() + (parseInt(root.getAttribute("data-seconds-left"), 10) || 0) * 1000;
  var timer = null;
  var backoffMs = pollMs;
  var inFlight = false;
  var expiryPolled = false;
  var lang = document.documentElement.lang || "en";

  function usd(value) {
    var number = Number(value);
    if (!isFinite(number)) {
      return value;
    }
    return new Intl.NumberFormat(lang, { minimumFractionDigits: 2, maximumFractionDigits: 2, useGrouping: true })
      .format(number) + " USD";
  }

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  // Same format as the server's `countdown` filter.
  function countdown(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var secs = seconds % 60;
    if (days) {
      return days + "d " + pad(hours) + ":" + pad(minutes) + ":" + pad(secs);
    }
    if (hours) {
      return hours + ":" + pad(minutes) + ":" + pad(secs);
    }
    return pad(minutes) + ":" + pad(secs);
  }

  function visible(el, status) {
    var states = el.getAttribute("data-show");
    var flag = el.getAttribute("data-if");
    if (states && states.split(/\s+/).indexOf(status.state) < 0) {
      return false;
    }
    if (flag && !status[flag]) {
      return false;
    }
    return true;
  }

  function each(selector, fn) {
    Array.prototype.forEach.call(root.querySelectorAll(selector), fn);
  }

  function apply(status) {
    if (String(status.request === null ? "" : status.request) !== requestId) {
      // Paid in another currency or re-quoted elsewhere: a new address and amount.
      window.location.reload();
      return;
    }
    state = status.state;
    final = Boolean(status.final);
    root.setAttribute("data-state", state);
    each("[data-show], [data-if]", function (el) {
      el.hidden = !visible(el, status);
    });
    each("[data-field]", function (el) {
      var value = status[el.getAttribute("data-field")];
      if (value === null || value === undefined) {
        return;
      }
      var text = el.getAttribute("data-format") === "usd" ? usd(value) : String(value);
      if (el.textContent !== text) {
        el.textContent = text;
      }
    });
    each("[data-href]", function (el) {
      var value = status[el.getAttribute("data-href")];
      if (value && el.getAttribute("href") !== value) {
        el.setAttribute("href", value);
      }
    });
    each("[data-src]", function (el) {
      var value = status[el.getAttribute("data-src")];
      if (value && el.getAttribute("src") !== value) {
        el.setAttribute("src", value);
      }
    });
    each("progress[data-value]", function (el) {
      var max = Number(status[el.getAttribute("data-max")]) || 1;
      el.max = max;
      el.value = Math.min(max, Number(status[el.getAttribute("data-value")]) || 0);
    });
    deadline = Date.now() + (status.seconds_left || 0) * 1000;
    pollMs = Math.max(1, status.poll_seconds || 5) * 1000;
    tick();
  }

  function offline(on) {
    var note = document.getElementById("offline");
    if (on && !note) {
      note = document.createElement("p");
      note.id = "offline";
      note.className = "notice";
      note.setAttribute("role", "status");
      note.textContent = root.getAttribute("data-offline");
      root.insertBefore(note, root.querySelector(".state"));
    } else if (!on && note) {
      note.parentNode.removeChild(note);
    }
  }

  function schedule(ms) {
    window.clearTimeout(timer);
    if (!final) {
      timer = window.setTimeout(poll, ms);
    }
  }

  function poll() {
    if (inFlight || final) {
      return;
    }
    if (document.hidden) {
      return; // resumed by visibilitychange
    }
    inFlight = true;
    fetch(statusUrl, { headers: { Accept: "application/json" }, cache: "no-store", credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("status " + response.status);
        }
        return response.json();
      })
      .then(function (status) {
        inFlight = false;
        backoffMs = pollMs;
        offline(false);
        apply(status);
        schedule(pollMs);
      })
      .catch(function () {
        inFlight = false;
        offline(true);
        backoffMs = Math.min(maxBackoffMs, backoffMs * 2);
        schedule(backoffMs);
      });
  }

  function tick() {
    var left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
    each("[data-countdown]", function (el) {
      var text = countdown(left);
      if (el.textContent !== text) {
        el.textContent = text;
      }
    });
    if (left === 0 && state === "new" && !expiryPolled) {
      // The rate lock just ended: ask the server now rather than at the next poll.
      expiryPolled = true;
      schedule(0);
    }
  }

  function feedback(button, text) {
    var note = button.nextElementSibling;
    if (note && note.classList.contains("copied")) {
      note.textContent = text;
      window.setTimeout(function () {
        if (note.textContent === text) {
          note.textContent = "";
        }
      }, 4000);
    }
  }

  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  each("button[data-copy]", function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var target = document.getElementById(button.getAttribute("data-copy"));
      var text = target ? target.textContent.trim() : "";
      var done = function () {
        feedback(button, root.getAttribute("data-copied"));
      };
      var failed = function () {
        if (target) {
          selectText(target);
        }
        feedback(button, root.getAttribute("data-copy-failed"));
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, failed);
      } else {
        failed();
      }
    });
  });

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      schedule(0);
    }
  });

  window.setInterval(tick, 1000);
  tick();
  schedule(final ? 0 : pollMs);
})();
