// A node-redisson client driven line by line from tests/interop (node_redisson_test.go): each
// line on standard input is a command, each answer one line on standard output.
//   try NAME      -> "try true" | "try false"   (tryLock without waiting, watchdog lease)
//   lock NAME     -> "locked <unix ms>"          (lock(): waits as long as it takes, watchdog)
//   unlock NAME   -> "unlocked" | "error <message>"
// REDIS_PORT (and REDIS_HOST, default 127.0.0.1) name the Redis, or REDIS_CLUSTER (host:port,...)
// a Redis Cluster's seeds (ioredis's Cluster client); one lock object per name.
import { createInterface } from 'node:readline';
import { Redisson } from 'node-redisson';

const seeds = (process.env.REDIS_CLUSTER || '').split(',').filter((s) => s !== '').map((s) => {
  const i = s.lastIndexOf(':');
  return { host: s.slice(0, i), port: Number(s.slice(i + 1)) };
});
const redisson = new Redisson({
  redis: seeds.length > 0
    ? { clusters: seeds }
    : { options: { host: process.env.REDIS_HOST || '127.0.0.1', port: Number(process.env.REDIS_PORT) } },
});
const locks = new Map();
const lockOf = (name) => {
  if (!locks.has(name)) locks.set(name, redisson.getLock(name));
  return locks.get(name);
};

const say = (line) => process.stdout.write(line + '\n');
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const [cmd, name] = line.trim().split(' ');
  const lock = lockOf(name);
  const run = async () => {
    switch (cmd) {
      case 'try':
        say('try ' + (await lock.tryLock(0, true)));
        break;
      case 'lock':
        await lock.lock();
        say('locked ' + Date.now());
        break;
      case 'unlock':
        await lock.unlock();
        say('unlocked');
        break;
      default:
        say('error unknown command ' + cmd);
    }
  };
  run().catch((err) => say('error ' + String(err && err.message ? err.message : err).replace(/\n/g, ' ')));
});
lines.on('close', async () => {
  await redisson.quit();
  process.exit(0);
});
say('ready');
