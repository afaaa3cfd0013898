// Both buttons start a DAG run through the page's API as the signed-in user, then follow it:
// the page reloads when it succeeds; a refusal or a failed run is said where the button is.
async function start(button, out, url, payload) {
  button.disabled = true;
  const resp = await fetch(url, {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify(payload)});
  const body = await resp.json();
  if (resp.ok) return body;
  out.className = 'outcome refused'; out.textContent = body.detail; button.disabled = false;
  return null;
}
async function follow(out, body, dag, onPoll) {
  for (;;) {
    await new Promise(r => setTimeout(r, 3000));
    const run = await (await fetch(`api/runs/${dag}/${encodeURIComponent(body.run_id)}`)).json();
    if (run.state === 'success') { location.reload(); return; }
    if (onPoll) onPoll(run);
    if (run.state === 'failed') { out.className = 'outcome refused'; out.textContent = `run ${body.run_id} failed: see its log in the DAG ${dag}`; return; }
  }
}
for (const button of document.querySelectorAll('.redrive button')) {
  button.addEventListener('click', async () => {
    const out = button.closest('.redrive').querySelector('.outcome');
    out.className = 'outcome running'; out.textContent = 're-driving ...';
    const body = await start(button, out, `api/flows/${button.dataset.flow}/redrive`,
      {rule: button.dataset.rule, business_date: button.dataset.date || null});
    if (!body) return;
    out.textContent = `${body.message} (run ${body.run_id}) ...`;
    await follow(out, body, 'streamshift_redrive');
  });
}
for (const button of document.querySelectorAll('.promote button')) {
  button.addEventListener('click', async () => {
    const box = button.closest('.promote'), out = box.querySelector('.outcome');
    out.textContent = 'checking the gate ...';
    const reason = box.querySelector('.reason').value || null;
    const body = await start(button, out, `api/flows/${button.dataset.flow}/promote`,
      {to: button.dataset.to, reason});
    if (!body) return;
    out.className = 'outcome running';
    out.textContent = `${body.message}: recording (run ${body.run_id}) ...`;
    await follow(out, body, 'streamshift_promote', run => {
      if (!run.approval) return;
      out.className = 'outcome awaiting'; out.innerHTML = '';
      out.append(`${body.message}: waiting for a second user's approval (run ${body.run_id}) — `);
      const link = document.createElement('a'); link.href = run.approval; link.target = '_top';
      link.textContent = 'Required actions'; out.append(link);
    });
  });
}
