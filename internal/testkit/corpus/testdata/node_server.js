// An HTTP server with server.maxConnections: Node accepts a connection
// beyond the limit and destroys it at once (net.Server's own check), so a
// client that already sent its request gets a reset. Each answer takes
// DELAY ms, as for a slow backend. Exits by itself after SECONDS.
// Usage: node node_server.js HOST PORT MAXCONN DELAY_MS SECONDS
const http = require('http');
const [host, port, max, delay, secs] = process.argv.slice(2);
const server = http.createServer((req, res) => {
  setTimeout(() => { res.setHeader('Connection', 'close'); res.end('ok\n'); }, Number(delay));
});
server.maxConnections = Number(max);
let dropped = 0;
server.on('drop', () => { dropped++; });
server.listen(Number(port), host);
setTimeout(() => { console.log(JSON.stringify({ dropped })); process.exit(0); }, Number(secs) * 1000);
