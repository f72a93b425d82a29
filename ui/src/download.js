// Downloads from the API in the browser (docs/ui.md, "Downloads"). The page keeps the user's
// token to itself and sends it only as an Authorization header, which the browser's download
// manager cannot send; and reading a checkpoint with fetch() would hold all of it in the
// page's memory. So the page asks for a one-minute link signed for its token (POST
// .../download-link, which also checks that the checkpoint can be read and says its size)
// and has the browser follow it: the archive streams to disk as any download does.
import { api, pageLink } from './api.js';
import { h, fmtBytes } from './dom.js';

// Download what linkPath makes a link for (what: words for the status line); btn is disabled
// meanwhile; say(message, isError) reports. A 401 (or a network failure) is thrown for the
// page's own handling; the API's other refusals are said.
export async function download(linkPath, btn, what, say, signal) {
  if (btn) btn.disabled = true;
  say('Preparing the download of ' + what + '…');
  try {
    const r = await api(linkPath, { method: 'POST', body: {}, signal });
    const url = pageLink(r.url, 'api/');
    if (!url) {
      say('Cannot download ' + what + ': the API answered no download link', true);
      return;
    }
    const a = h('a', { href: url, download: r.filename || '', rel: 'noopener', hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    say('Downloading ' + what + ' as ' + r.filename + ' (' + fmtBytes(r.size) + ', ' + r.files +
      (r.files === 1 ? ' file' : ' files') + '): see the browser\'s downloads.');
  } catch (e) {
    if (signal && signal.aborted) return;
    if (e.status === undefined) throw e;
    say('Cannot download ' + what + ': ' + e.message, true);
  } finally {
    if (btn) btn.disabled = false;
  }
}
